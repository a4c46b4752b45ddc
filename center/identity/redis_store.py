"""Shared identity store on Redis, for the workers of a recognizer on several hosts.

Layout under ``<key_prefix>:<space>:`` (one Redis instance; Redis Cluster is not supported because the scripts
follow merge chains to keys they compute): ``next_id`` (INCRBY: id blocks, never reused), ``version`` (INCR per
change), ``changes`` (sorted set id -> version of its last change), ``seen`` (sorted set id -> wall time of its
last sighting: retention and least-recently-seen eviction), ``id:<n>`` (hash: state, sum (float32 bytes),
count, camera, t_ms, wall_s, merged_into; first (float32 bytes) and enrolled: the enrolment embedding and the
version it landed at; exemplars: the gallery's latest looks, float32 rows of the sum's size),
``writer:<token>`` (hash: seq, the highest write number applied for a writer; push and dropped, the first
number of its latest push and the updates that push dropped; expiring
:data:`~vcascade.center.identity.store.WRITER_TTL_S` after its last push). Every change runs as one Lua script,
so it is atomic and versions follow commit order; vector sums are added inside the script (Redis's ``struct``
library). A push is a pipeline of such scripts: if the connection breaks midway, a prefix of it is applied, and
the numbers make sending it again apply the rest only.

The server must persist (``appendonly yes``). A Redis that lost its data anyway (restarted empty, flushed) is
noticed by its ``generation`` key and by ids going back (:mod:`.guard`); a record another program wrote that
cannot be read is answered as :data:`~vcascade.center.identity.store.MALFORMED` and skipped, never stopping the
pull of the others.
"""

from __future__ import annotations

import secrets

import numpy as np
import redis

from vcascade.center.identity.store import EVICTED, LIVE, MALFORMED, MERGED, WRITER_TTL_S, Sighting, StoredIdentity, StoreWrite

APPLIED, DROPPED, SKIPPED = 1, 0, 2
"""What the write script answers: applied, dropped (identity evicted), skipped (applied before)."""

_ADD = """
local function add(a, b)
  local out = {}
  for i = 0, string.len(b) / 4 - 1 do
    out[i + 1] = struct.pack('<f', struct.unpack('<f', a, 4 * i + 1) + struct.unpack('<f', b, 4 * i + 1))
  end
  return table.concat(out)
end
local function latest(old, new, limit)  -- the last `limit` bytes of old .. new (whole exemplars)
  local all = (old or '') .. new
  if string.len(all) > limit then all = string.sub(all, -limit) end
  return all
end
local function bump(p, id)
  local v = redis.call('INCR', p .. ':version')
  redis.call('ZADD', p .. ':changes', v, id)
end
"""

WRITE = _ADD + """
local p, id = ARGV[1], ARGV[2]
local writer = ARGV[10] ~= '' and (p .. ':writer:' .. ARGV[10]) or nil
if writer then  -- numbered: applied at most once per writer; ARGV[13] names the push (its first number)
  if redis.call('HGET', writer, 'push') ~= ARGV[13] then
    redis.call('HSET', writer, 'push', ARGV[13], 'dropped', 0)
    redis.call('EXPIRE', writer, ARGV[12])
  end
  if tonumber(redis.call('HGET', writer, 'seq') or '-1') >= tonumber(ARGV[11]) then return 2 end
end
local function done(answer)  -- marks the number applied after the change (a script that fails midway has not)
  if writer then
    redis.call('HSET', writer, 'seq', ARGV[11])
    if answer == 0 then redis.call('HINCRBY', writer, 'dropped', 1) end
    redis.call('EXPIRE', writer, ARGV[12])
  end
  return answer
end
for _ = 1, 64 do
  local state = redis.call('HGET', p .. ':id:' .. id, 'state')
  if state == 'merged' then id = redis.call('HGET', p .. ':id:' .. id, 'merged_into')
  elseif state == 'evicted' then return done(0)
  else break end
end
local key = p .. ':id:' .. id
local state = redis.call('HGET', key, 'state')
if state ~= 'live' and (state or ARGV[8] ~= '1') then return done(0) end
local wall = tonumber(ARGV[7])
if tonumber(ARGV[15]) > 0 and ARGV[14] ~= '' then  -- gallery: the latest ARGV[15] exemplars of the sum's size
  local old = state == 'live' and redis.call('HGET', key, 'exemplars') or ''
  redis.call('HSET', key, 'exemplars', latest(old, ARGV[14], tonumber(ARGV[15]) * string.len(ARGV[3])))
end
if state == 'live' then
  local old = redis.call('HMGET', key, 'sum', 'count', 'wall_s')
  redis.call('HSET', key, 'sum', add(old[1], ARGV[3]), 'count', tonumber(old[2]) + tonumber(ARGV[4]))
  if wall < tonumber(old[3]) then bump(p, id) return done(1) end
else  -- the enrolment lands: at the version the bump below makes
  local enrolled = tonumber(redis.call('GET', p .. ':version') or '0') + 1
  redis.call('HSET', key, 'state', 'live', 'sum', ARGV[3], 'count', ARGV[4], 'merged_into', -1, 'enrolled', enrolled)
  if ARGV[9] ~= '' then redis.call('HSET', key, 'first', ARGV[9]) end
end
redis.call('HSET', key, 'camera', ARGV[5], 't_ms', ARGV[6], 'wall_s', ARGV[7])
redis.call('ZADD', p .. ':seen', wall, id)
bump(p, id)
return done(1)
"""

MERGE = _ADD + """
local p, loser, survivor = ARGV[1], ARGV[2], ARGV[3]
for _ = 1, 64 do
  if redis.call('HGET', p .. ':id:' .. survivor, 'state') ~= 'merged' then break end
  survivor = redis.call('HGET', p .. ':id:' .. survivor, 'merged_into')
end
local a, b = p .. ':id:' .. loser, p .. ':id:' .. survivor
if loser == survivor or redis.call('HGET', a, 'state') ~= 'live' or redis.call('HGET', b, 'state') ~= 'live' then
  return 0
end
local x = redis.call('HMGET', a, 'sum', 'count', 'camera', 't_ms', 'wall_s')
local y = redis.call('HMGET', b, 'sum', 'count', 'wall_s')
redis.call('HSET', b, 'sum', add(y[1], x[1]), 'count', tonumber(x[2]) + tonumber(y[2]))
local kept = latest(redis.call('HGET', b, 'exemplars'), redis.call('HGET', a, 'exemplars') or '',
                    tonumber(ARGV[4]) * string.len(y[1]))
if tonumber(ARGV[4]) > 0 and string.len(kept) > 0 then redis.call('HSET', b, 'exemplars', kept) end
if tonumber(x[5]) > tonumber(y[3]) then
  redis.call('HSET', b, 'camera', x[3], 't_ms', x[4], 'wall_s', x[5])
  redis.call('ZADD', p .. ':seen', x[5], survivor)
end
redis.call('HSET', a, 'state', 'merged', 'merged_into', survivor)
redis.call('HDEL', a, 'sum', 'exemplars')
redis.call('ZREM', p .. ':seen', loser)
bump(p, survivor)
bump(p, loser)
return 1
"""

SWEEP = """
local p, cutoff, capacity = ARGV[1], ARGV[2], tonumber(ARGV[3])
local seen = p .. ':seen'
local old = redis.call('ZRANGEBYSCORE', seen, '-inf', '(' .. cutoff)
local excess = redis.call('ZCARD', seen) - #old - capacity
if excess > 0 then
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', seen, cutoff, '+inf', 'LIMIT', 0, excess)) do table.insert(old, id) end
end
for _, id in ipairs(old) do
  redis.call('HSET', p .. ':id:' .. id, 'state', 'evicted')
  redis.call('HDEL', p .. ':id:' .. id, 'sum', 'exemplars')
  redis.call('ZREM', seen, id)
  redis.call('ZADD', p .. ':changes', redis.call('INCR', p .. ':version'), id)
end
return #old
"""


RAISE_IDS = """
local key, floor = ARGV[1] .. ':next_id', tonumber(ARGV[2])
if tonumber(redis.call('GET', key) or '0') < floor then redis.call('SET', key, floor) end
return 1
"""


class RedisStore:
    """:class:`vcascade.center.identity.store.IdentityStore` on a Redis server.

    Args:
        url: redis-py URL (``redis://host:port/db``).
        space: identity space name (the recognizer's).
        timeout_s: socket connect and read timeout, s; a call that takes longer raises ``redis.TimeoutError``.
        key_prefix: prefix of every key.
        exemplars: gallery looks kept per identity besides its enrolment embedding, the latest (0: none;
            :mod:`.gallery`).

    Calls raise ``redis.RedisError`` subclasses (``ConnectionError``, ``TimeoutError``) when the server is away.
    """

    def __init__(self, url: str, space: str, timeout_s: float = 0.5, key_prefix: str = "vcascade:identity",
                 exemplars: int = 0) -> None:  # fmt: skip
        self.prefix, self.exemplars = f"{key_prefix}:{space}", int(exemplars)
        self._redis = redis.Redis.from_url(url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s)
        self._write = self._redis.register_script(WRITE)
        self._merge = self._redis.register_script(MERGE)
        self._sweep = self._redis.register_script(SWEEP)
        self._raise_ids = self._redis.register_script(RAISE_IDS)

    def reserve_ids(self, n: int) -> list[int]:
        last = int(self._redis.incrby(f"{self.prefix}:next_id", n))
        return list(range(last - n + 1, last + 1))

    def write(self, writes: list[StoreWrite], writer: str | None = None, first_seq: int = 0) -> int:
        if not writes:
            return 0
        pipe = self._redis.pipeline(transaction=False)
        for seq, w in enumerate(writes, first_seq):
            self._write(args=[self.prefix, w.identity_id, np.asarray(w.sum_delta, np.float32).tobytes(),
                              w.count_delta, w.seen.camera, w.seen.t_ms, w.seen.wall_s, int(w.enrol),
                              b"" if w.first is None else np.asarray(w.first, np.float32).tobytes(),
                              writer or "", seq, WRITER_TTL_S, first_seq,
                              b"" if w.exemplars is None else np.asarray(w.exemplars, np.float32).tobytes(),
                              self.exemplars],
                        client=pipe)  # fmt: skip
        if writer is None:
            return sum(1 for answer in pipe.execute() if answer == DROPPED)
        pipe.hget(f"{self.prefix}:writer:{writer}", "dropped")  # this push's, over all its sendings
        return int(pipe.execute()[-1] or 0)

    def changes(self, cursor: int) -> tuple[list[StoredIdentity], int]:
        changed = self._redis.zrangebyscore(f"{self.prefix}:changes", f"({cursor}", "+inf", withscores=True)
        pipe = self._redis.pipeline(transaction=False)
        for ident, _ in changed:
            pipe.hgetall(f"{self.prefix}:id:{int(ident)}")
        found = [_stored(ident, fields) for (ident, _), fields in zip(changed, pipe.execute())]
        return found, max([cursor, *(int(score) for _, score in changed)])

    def generation(self) -> str:
        pipe = self._redis.pipeline(transaction=False)
        pipe.set(f"{self.prefix}:generation", secrets.token_hex(8), nx=True)
        pipe.get(f"{self.prefix}:generation")
        return pipe.execute()[-1].decode("ascii", "replace")

    def raise_ids(self, floor: int) -> None:
        self._raise_ids(args=[self.prefix, floor])

    def merge(self, loser: int, survivor: int) -> bool:
        return bool(self._merge(args=[self.prefix, loser, survivor, self.exemplars]))

    def sweep(self, now_s: float, retention_s: float, capacity: int) -> int:
        return int(self._sweep(args=[self.prefix, repr(now_s - retention_s), capacity]))

    def close(self) -> None:
        self._redis.close()


def _stored(member: bytes, fields: dict[bytes, bytes]) -> StoredIdentity:
    """The record of id ``member`` from its hash; :data:`MALFORMED` (id -1 when the id itself is not a number)
    when a field cannot be read: another program, or an attacker with access to the server, wrote it."""
    try:
        ident = int(member)
    except ValueError:
        return StoredIdentity(-1, MALFORMED)
    try:
        return _parse(ident, fields)
    except (KeyError, ValueError, UnicodeDecodeError):
        return StoredIdentity(ident, MALFORMED)


def _vector(data: bytes) -> np.ndarray:
    """float32 vector from its bytes; ValueError when they are not whole float32 values or not finite."""
    vector = np.frombuffer(data, np.float32).copy()  # ValueError: a length not a multiple of 4
    if not vector.size or not np.isfinite(vector).all():
        raise ValueError("empty or non-finite vector")
    return vector


def _parse(ident: int, fields: dict[bytes, bytes]) -> StoredIdentity:
    state = fields.get(b"state", b"evicted").decode()
    if state != LIVE:
        if state not in (MERGED, EVICTED):
            raise ValueError(f"unknown state {state!r}")
        return StoredIdentity(ident, state, merged_into=int(fields.get(b"merged_into", -1)))
    seen = Sighting(fields[b"camera"].decode(), float(fields[b"t_ms"]), float(fields[b"wall_s"]))
    first, exemplars, total = fields.get(b"first"), fields.get(b"exemplars"), _vector(fields[b"sum"])
    return StoredIdentity(ident, state, total, int(fields[b"count"]), seen,
                          first=None if first is None else _vector(first),
                          enrolled_version=int(fields.get(b"enrolled", 0)),
                          exemplars=None if exemplars is None else _vector(exemplars).reshape(-1, len(total)),
                          )  # fmt: skip
