"""Selection: per-camera tracking (ByteTrack), the ROI policy that decides which tracked detections are sent, to
which recognizer and why, and the crop, JPEG encoding and wire header of each ROI sent.
"""
