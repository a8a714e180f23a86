"""Drawing on RGB uint8 frames with OpenCV primitives (no fonts to fetch, microseconds per call).

Pose: body, feet and hands as coloured links in the released skeleton colours, sized to the person; every
keypoint (the face's 238 landmarks too) as dots when asked.
Seg: the released palette blended over the frame. Boxes: rectangles with track ids.
"""

from __future__ import annotations

import cv2
import numpy as np

from ..models.metadata import pose_metadata, seg_metadata
from ..threed.floor import transform

FACE_START = 70  # keypoints 70..307 are face landmarks: drawn as points, not links


def _ints(points: np.ndarray) -> np.ndarray:
    return np.round(np.asarray(points, dtype=np.float64)).astype(np.int64)


def draw_pose(
    frame: np.ndarray,
    keypoints: np.ndarray,
    scores: np.ndarray,
    threshold: float = 0.3,
    thickness: int | None = None,
    every_point: bool = False,
) -> np.ndarray:
    """Draw one person's skeleton in place: the released links (body, feet, hands) and dots on their joints, as
    thick as the person is tall on screen (a line per 80 pixels), so a far person stays a thin figure and a near
    one reads from across the room. `every_point` adds all 308 keypoints as dots, the 238 face landmarks too
    (a cloud over the face at most sizes). Keypoints under `threshold` are skipped. Returns `frame`."""
    meta = pose_metadata()
    pts = _ints(keypoints)
    ok = np.asarray(scores) > threshold
    if not ok.any():
        return frame
    if thickness is None:
        thickness = max(1, round(np.ptp(np.asarray(keypoints)[ok], axis=0).max() / 80))
    joints = set()
    for (a, b), color in zip(meta.skeleton, meta.skeleton_colors, strict=True):
        if ok[a] and ok[b]:
            cv2.line(frame, tuple(pts[a]), tuple(pts[b]), color, thickness, cv2.LINE_AA)
            joints.update((a, b))
    dots = np.flatnonzero(ok) if every_point else sorted(joints | {i for i in range(5) if ok[i]})  # + the face's 5
    for i in dots:
        r = max(1, thickness // 2) if i >= FACE_START else thickness + 1
        cv2.circle(frame, tuple(pts[i]), r, meta.colors[i], -1, cv2.LINE_AA)
    return frame


def palette_image(labels: np.ndarray) -> np.ndarray:
    """Class labels [H, W] -> RGB colours [H, W, 3] in the released palette."""
    lut = np.asarray(seg_metadata().palette, dtype=np.uint8)
    return lut[np.clip(labels, 0, len(lut) - 1)]


def draw_seg(frame: np.ndarray, labels: np.ndarray, opacity: float = 0.5) -> np.ndarray:
    """Blend the palette colours of body-part labels over the frame (background left untouched)."""
    colours = palette_image(labels)
    mask = labels > 0
    blended = cv2.addWeighted(frame, 1 - opacity, colours, opacity, 0)
    frame[mask] = blended[mask]
    return frame


def draw_box(frame: np.ndarray, box_xywh, label: str | None = None, color=(255, 200, 0)) -> np.ndarray:
    """A rectangle with an optional label (e.g. the track id) on a filled tab above it."""
    x, y, w, h = (int(round(v)) for v in box_xywh)
    thickness = max(1, round(max(frame.shape[:2]) / 500))
    cv2.rectangle(frame, (x, y), (x + w, y + h), color, thickness, cv2.LINE_AA)
    if label:
        font_scale = max(0.4, max(frame.shape[:2]) / 1500)
        (tw, th), base = cv2.getTextSize(label, cv2.FONT_HERSHEY_SIMPLEX, font_scale, thickness)
        top = max(0, y - th - base - 2)
        cv2.rectangle(frame, (x, top), (x + tw + 4, top + th + base + 2), color, -1)
        cv2.putText(frame, label, (x + 2, top + th + 1), cv2.FONT_HERSHEY_SIMPLEX, font_scale, (0, 0, 0), thickness,
                    cv2.LINE_AA)  # fmt: skip
    return frame


def normals_image(normals: np.ndarray) -> np.ndarray:
    """Unit normals [H, W, 3] as RGB, the usual (n + 1) / 2 encoding: x right -> red, y -> green, z -> blue."""
    return ((np.clip(normals, -1, 1) + 1) * 127.5 + 0.5).astype(np.uint8)


def depth_image(depth: np.ndarray, percentiles: tuple[float, float] = (2, 98)) -> np.ndarray:
    """Depth [H, W] as RGB with the turbo colour map, near warm (red) and far cool (blue), over each frame's own
    2nd-98th percentile range (robust to a few wild pixels; colours are not comparable across frames)."""
    finite = depth[np.isfinite(depth)]
    near, far = np.percentile(finite, percentiles) if finite.size else (0.0, 1.0)
    closeness = 1 - (np.nan_to_num(depth, nan=far) - near) / max(far - near, 1e-6)
    levels = (np.clip(closeness, 0, 1) * 255 + 0.5).astype(np.uint8)
    return cv2.cvtColor(cv2.applyColorMap(levels, cv2.COLORMAP_TURBO), cv2.COLOR_BGR2RGB)


VIEW_SPAN_M = 5.0  # the width of ground each 3-D view shows
BODY_LINKS = 19  # the skeleton's first links: body and feet (hands and face are too small to see in a view)


def draw_views_3d(frame: np.ndarray, people: list, world: np.ndarray | None, threshold: float = 0.3) -> np.ndarray:
    """Two small views of the people's 3-D skeletons in the bottom-right corner, in place: from above (the floor,
    the camera at the bottom middle) and from the side (the floor as a line). In the world frame on the floor
    when it is known, else in the camera's (x right, z away, y down). Returns `frame`."""
    lifted = [p for p in people if getattr(p, "keypoints_3d", None) is not None]
    h, w = frame.shape[:2]
    size = max(48, min(h, w) // 4)
    meta = pose_metadata()
    for n, (first, second, up_sign) in enumerate(((0, 1, 1), (0, 2, 1))):  # (X, Y) from above, (X, Z) from the side
        x0, y0 = w - (2 - n) * (size + 4), h - size - 4
        panel = frame[y0 : y0 + size, x0 : x0 + size]
        panel[:] = (panel * 0.35).astype(np.uint8)
        cv2.rectangle(frame, (x0, y0), (x0 + size - 1, y0 + size - 1), (200, 200, 200), 1)
        scale = size / VIEW_SPAN_M
        for p in lifted:
            points = np.asarray(p.keypoints_3d, np.float64)
            if world is not None:
                points = transform(world, points)
                axes = (points[:, first], points[:, second])
                bottom = 0.0 if second == 2 else -0.5  # the floor at the bottom; the camera's foot near it
            else:
                axes = (points[:, 0], -points[:, 1] if second == 2 else points[:, 2])
                bottom = -1.5 if second == 2 else 0.0
            u = x0 + size / 2 + axes[0] * scale
            v = y0 + size - (axes[1] - bottom) * scale * up_sign
            ok = np.isfinite(u) & np.isfinite(v) & (np.asarray(p.keypoints_3d_confidence) > threshold)
            pts = np.stack([u, v], 1)
            for (a, b), color in list(zip(meta.skeleton, meta.skeleton_colors, strict=True))[:BODY_LINKS]:
                if ok[a] and ok[b]:
                    cv2.line(frame, tuple(_ints(pts[a])), tuple(_ints(pts[b])), color, 1, cv2.LINE_AA)
    return frame


ZONE_COLOUR, LINE_COLOUR, BUSY_COLOUR = (80, 200, 255), (255, 220, 0), (255, 80, 60)


def draw_rules(frame: np.ndarray, rules) -> np.ndarray:
    """The event rules' zones (outlined, red while crowded, with their occupancy) and lines (with in / out counts),
    in place. Returns `frame`."""
    counts = rules.counts()
    for zone in rules.zones:
        colour = BUSY_COLOUR if zone.crowded else ZONE_COLOUR
        points = _ints(zone.polygon).reshape(-1, 1, 2)
        cv2.polylines(frame, [points], True, colour, 2, cv2.LINE_AA)
        label, corner = f"{zone.name}: {counts['zones'][zone.name]}", tuple(_ints(zone.polygon.min(0) + [4, 16]))
        cv2.putText(frame, label, corner, cv2.FONT_HERSHEY_SIMPLEX, 0.45, colour, 1, cv2.LINE_AA)
    for line in rules.lines:
        cv2.line(frame, tuple(_ints(line.start)), tuple(_ints(line.end)), LINE_COLOUR, 2, cv2.LINE_AA)
        c = counts["lines"][line.name]
        label = f"{line.name}: {line.in_name} {c['in']} / {line.out_name} {c['out']}"
        cv2.putText(frame, label, tuple(_ints((line.start + line.end) / 2 + [6, 0])), cv2.FONT_HERSHEY_SIMPLEX, 0.45,
                    LINE_COLOUR, 1, cv2.LINE_AA)  # fmt: skip
    return frame
