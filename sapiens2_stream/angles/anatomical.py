"""3-D anatomical angles from people in metres, named after OpenSim's coordinates.

Each segment gets a frame as OpenSim's models have them (X forward, Y up along the segment, Z to the right), made
from the 308 keypoints: the pelvis from the hips and the floor's up (the pelvis's tilt is not seen in hip centres,
so the pelvis is taken upright on the floor); the thorax from the shoulders and the mid-hip; a thigh from hip and
knee, turned about its length by the knee's hinge axis (from the plane of the bent knee, or where the knee is nearly
straight from the foot's long axis, heel to between the toes); the shank likewise, the foot along its long axis;
an upper arm and forearm from shoulder, elbow and wrist (the elbow's hinge from the bent elbow), the hand from the
wrist and the index and little-finger knuckles. A joint's angles are the child frame in the parent's, decomposed
in OpenSim's order: hips, shoulders and lumbar flexion (Z), adduction or bending (X), rotation (Y); the wrist
pronation (Y), flexion (Z), deviation (X). The left limbs are mirrored first, so a sign means the same on both
sides.

Signs, in degrees: flexion, adduction (towards the midline), internal rotation, dorsiflexion, pronation, ulnar
deviation and lumbar extension positive; `lumbar_bending` positive to the person's right, `lumbar_rotation`
positive turning the chest to their left. Zeros: the anatomical position (standing, arms hanging, palms forward;
`pro_sup` 0 is the palm forward, 90 the thumb forward). Where an angle cannot be seen it is NaN with the reason:
an unsure keypoint, a straight elbow or knee whose hinge turns freely about the limb, no floor to stand the pelvis on.
"""

from __future__ import annotations

import numpy as np

from ..models.metadata import pose_metadata

SIDES3 = (("r", "right"), ("l", "left"))
NAMES_3D = (
    "hip_flexion_r", "hip_adduction_r", "hip_rotation_r", "knee_angle_r", "ankle_angle_r",
    "hip_flexion_l", "hip_adduction_l", "hip_rotation_l", "knee_angle_l", "ankle_angle_l",
    "lumbar_extension", "lumbar_bending", "lumbar_rotation",
    "arm_flex_r", "arm_add_r", "arm_rot_r", "elbow_flex_r", "pro_sup_r", "wrist_flex_r", "wrist_dev_r",
    "arm_flex_l", "arm_add_l", "arm_rot_l", "elbow_flex_l", "pro_sup_l", "wrist_flex_l", "wrist_dev_l",
)  # fmt: skip
COLUMN = {name: i for i, name in enumerate(NAMES_3D)}
HINGE_DEG = 25.0  # a knee or elbow bent less than this: its hinge axis is taken from elsewhere (the foot) or unknown
_KP = {n: i for i, n in enumerate(pose_metadata().names)}

# the keypoints each angle needs (by 308 name, "{s}" the side); the pelvis and thorax's are added to every angle
PELVIS = ("left_hip", "right_hip")
THORAX = ("left_shoulder", "right_shoulder", "left_hip", "right_hip")
NEEDS = {
    "hip_flexion": ("{s}_hip", "{s}_knee"), "hip_adduction": ("{s}_hip", "{s}_knee"),
    "hip_rotation": ("{s}_hip", "{s}_knee", "{s}_ankle", "{s}_heel", "{s}_big_toe", "{s}_small_toe"),
    "knee_angle": ("{s}_hip", "{s}_knee", "{s}_ankle"),
    "ankle_angle": ("{s}_knee", "{s}_ankle", "{s}_heel", "{s}_big_toe", "{s}_small_toe"),
    "lumbar_extension": THORAX, "lumbar_bending": THORAX, "lumbar_rotation": THORAX,
    "arm_flex": ("{s}_shoulder", "{s}_elbow"), "arm_add": ("{s}_shoulder", "{s}_elbow"),
    "arm_rot": ("{s}_shoulder", "{s}_elbow", "{s}_wrist"), "elbow_flex": ("{s}_shoulder", "{s}_elbow", "{s}_wrist"),
    "pro_sup": ("{s}_elbow", "{s}_wrist", "{s}_forefinger_third_joint", "{s}_pinky_finger_third_joint"),
    "wrist_flex": ("{s}_elbow", "{s}_wrist", "{s}_forefinger_third_joint", "{s}_pinky_finger_third_joint"),
    "wrist_dev": ("{s}_elbow", "{s}_wrist", "{s}_forefinger_third_joint", "{s}_pinky_finger_third_joint"),
}  # fmt: skip
# the bones whose lengths a track keeps (their ends, "{s}" each side)
BONES = {"thigh": ("{s}_hip", "{s}_knee"), "shank": ("{s}_knee", "{s}_ankle"), "foot": ("{s}_heel", "{s}_big_toe"),
         "upper_arm": ("{s}_shoulder", "{s}_elbow"), "forearm": ("{s}_elbow", "{s}_wrist"),
         "hand": ("{s}_wrist", "{s}_forefinger_third_joint")}  # fmt: skip
LEG_POINTS = (("hip", "hip"), ("knee", "knee"), ("ankle", "ankle"), ("heel", "heel"), ("big_toe", "big_toe"),
              ("small_toe", "small_toe"))  # fmt: skip
ARM_POINTS = (("shoulder", "shoulder"), ("elbow", "elbow"), ("wrist", "wrist"), ("index", "forefinger_third_joint"),
              ("pinky", "pinky_finger_third_joint"))  # fmt: skip
LEG_IDS = {side: [_KP[f"{side}_{n}"] for _, n in LEG_POINTS] for _, side in SIDES3}
ARM_IDS = {side: [_KP[f"{side}_{n}"] for _, n in ARM_POINTS] for _, side in SIDES3}
MIRROR = np.array([1.0, 1.0, -1.0])  # the left limbs are the right ones mirrored across the body's middle
BONE_NAMES = tuple(f"{side} {bone}" for _, side in SIDES3 for bone in BONES)


def _needs(name: str) -> list[int]:
    """The keypoints (308 ids) an angle of `NAMES_3D` uses."""
    base, _, short = name.rpartition("_") if name[-2:] in ("_r", "_l") else (name, "", "")
    side = {"r": "right", "l": "left"}.get(short, "")
    extra = THORAX if base.startswith(("arm", "elbow", "pro", "wrist")) else PELVIS
    return [_KP[k.format(s=side)] for k in (*NEEDS[base], *extra)]


NEEDED = [_needs(n) for n in NAMES_3D]
BONE_ENDS = np.array([[_KP[end.format(s=side)] for end in ends] for _, side in SIDES3 for ends in BONES.values()])
BONES_OF = {name: [i for i, b in enumerate(BONE_ENDS) if set(b) <= set(NEEDED[j])] for j, name in enumerate(NAMES_3D)}


def unit(v: np.ndarray) -> np.ndarray:
    """Unit vectors along the last axis; NaN where a vector has no length."""
    n = np.sqrt((v * v).sum(-1, keepdims=True))
    return np.divide(v, n, out=np.full(np.broadcast_shapes(v.shape, n.shape), np.nan), where=n > 1e-9)


def cross(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a x b over the last axis (3): NumPy's `cross` costs ten times more on a handful of vectors."""
    a0, a1, a2 = a[..., 0], a[..., 1], a[..., 2]
    b0, b1, b2 = b[..., 0], b[..., 1], b[..., 2]
    return np.stack([a1 * b2 - a2 * b1, a2 * b0 - a0 * b2, a0 * b1 - a1 * b0], -1)


def frame_yz(y: np.ndarray, z: np.ndarray) -> np.ndarray:
    """Frames [..., 3, 3] (columns X, Y, Z) with Y along `y` and Z as near `z` as is square to it."""
    y = unit(y)
    x = unit(cross(y, z))
    return np.stack([x, y, cross(x, y)], -1)


def zxy(r: np.ndarray) -> np.ndarray:
    """Angles [..., 3] (degrees: about Z, then X, then Y) of rotations r [..., 3, 3] = Rz Rx Ry."""
    a = np.arctan2(-r[..., 0, 1], r[..., 1, 1])
    b = np.arcsin(np.clip(r[..., 2, 1], -1, 1))
    c = np.arctan2(-r[..., 2, 0], r[..., 2, 2])
    return np.degrees(np.stack([a, b, c], -1))


def yzx(r: np.ndarray) -> np.ndarray:
    """Angles [..., 3] (degrees: about Y, then Z, then X) of rotations r [..., 3, 3] = Ry Rz Rx."""
    c = np.arctan2(-r[..., 2, 0], r[..., 0, 0])
    a = np.arcsin(np.clip(r[..., 1, 0], -1, 1))
    b = np.arctan2(-r[..., 1, 2], r[..., 1, 1])
    return np.degrees(np.stack([c, a, b], -1))


def line_angles(y: np.ndarray) -> np.ndarray:
    """The Z and X angles of `zxy` (flexion, adduction) of a segment whose Y is `y` [P, 3] (unit): they depend on the
    segment's line alone, so they stand where its turn about the line is not seen."""
    return np.degrees(np.stack([np.arctan2(-y[:, 0], y[:, 1]), np.arcsin(np.clip(y[:, 2], -1, 1))], -1))


def bend(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """How far two segment directions (unit, pointing along the limb the same way) turn at their joint: degrees."""
    return np.degrees(np.arccos(np.clip((a * b).sum(-1), -1, 1)))


def leg(p: dict[str, np.ndarray]) -> np.ndarray:
    """A right (or mirrored left) leg's hip flexion, adduction, rotation, knee and ankle angles, in pelvis
    coordinates (points [P, 3] by short name): [P, 5] degrees."""
    foot = (p["big_toe"] + p["small_toe"]) / 2 - p["heel"]  # the foot's long axis: heel to between the toes
    thigh, shank = unit(p["hip"] - p["knee"]), unit(p["knee"] - p["ankle"])
    knee = bend(thigh, shank)
    # the knee's hinge axis (Z, to the right): from the bent knee's plane, else from the foot's line
    from_plane = unit(cross(shank, thigh))
    from_foot = unit(cross(foot, shank))
    axis = np.where((knee >= HINGE_DEG)[:, None], from_plane, from_foot)
    thigh_frame, shank_frame = frame_yz(thigh, axis), frame_yz(shank, axis)
    hip = np.column_stack([line_angles(thigh), zxy(thigh_frame)[:, 2]])
    in_thigh = np.einsum("pji,pj->pi", thigh_frame, shank)
    knee_signed = np.degrees(np.arctan2(in_thigh[:, 0], in_thigh[:, 1]))
    in_shank = np.einsum("pji,pj->pi", shank_frame, unit(foot))
    ankle = np.degrees(np.arctan2(in_shank[:, 1], in_shank[:, 0]))
    return np.column_stack([hip, knee_signed, ankle])


def arm(p: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """A right (or mirrored left) arm's flexion, adduction, rotation, elbow flexion, pro_sup, wrist flexion and
    deviation in thorax coordinates: ([P, 7] degrees, [P] whether the elbow is bent enough to show its hinge)."""
    upper, fore = unit(p["shoulder"] - p["elbow"]), unit(p["elbow"] - p["wrist"])
    elbow = bend(upper, fore)
    bent = elbow >= HINGE_DEG
    axis = unit(cross(upper, fore))
    upper_frame, fore_frame = frame_yz(upper, axis), frame_yz(fore, axis)
    knuckles = (p["index"] + p["pinky"]) / 2
    hand_frame = frame_yz(p["wrist"] - knuckles, p["index"] - p["pinky"])
    wrist = yzx(np.einsum("pji,pjk->pik", fore_frame, hand_frame))
    return np.column_stack([line_angles(upper), zxy(upper_frame)[:, 2], elbow, wrist]), bent


def anatomical_angles(keypoints: np.ndarray, confidence: np.ndarray, up: np.ndarray | None
                      ) -> tuple[np.ndarray, np.ndarray, list[dict[str, str]]]:  # fmt: skip
    """People's 3-D angles: keypoints [P, 308, 3] metres (any right-handed frame: a camera's or a calibration's
    world), their confidence [P, 308], and the floor's up in that frame (None: not known; the pelvis then stands
    along the trunk and the lumbar angles are NaN). Returns (angles [P, len(NAMES_3D)] degrees, confidence [P,
    len(NAMES_3D)]: the least of the keypoints each uses, and per person the reasons of the angles NaN by
    geometry: {name: reason})."""
    kp = np.asarray(keypoints, np.float64)
    n = kp.shape[0]
    out = np.full((n, len(NAMES_3D)), np.nan)
    why: list[dict[str, str]] = [{} for _ in range(n)]
    conf = np.stack([np.asarray(confidence, np.float64)[:, ids].min(1) for ids in NEEDED], 1) if n else out.copy()
    if not n:
        return out, conf, why

    def at(name: str) -> np.ndarray:
        return kp[:, _KP[name]]

    hip_mid = (at("left_hip") + at("right_hip")) / 2
    neck = (at("left_shoulder") + at("right_shoulder")) / 2
    upward = np.broadcast_to(unit(np.asarray(up, np.float64)), hip_mid.shape) if up is not None else neck - hip_mid
    z = unit(at("right_hip") - at("left_hip"))
    x = unit(cross(upward, z))
    pelvis = np.stack([x, cross(z, x), z], -1)  # columns X, Y, Z
    thorax = frame_yz(neck - hip_mid, at("right_shoulder") - at("left_shoulder"))

    def both_sides(frame: np.ndarray, origin: np.ndarray, ids: dict[str, list[int]]) -> np.ndarray:
        """The limb's points in the frame's coordinates, right then left mirrored: [2P, K, 3]."""
        right = np.einsum("pji,pkj->pki", frame, kp[:, ids["right"]] - origin[:, None])
        left = np.einsum("pji,pkj->pki", frame, kp[:, ids["left"]] - origin[:, None]) * MIRROR
        return np.concatenate([right, left])

    legs = both_sides(pelvis, hip_mid, LEG_IDS)
    values = leg({name: legs[:, j] for j, (name, _) in enumerate(LEG_POINTS)})
    for k, short in enumerate(("r", "l")):
        first = COLUMN[f"hip_flexion_{short}"]
        out[:, first : first + 5] = values[k * n : (k + 1) * n]
    arms = both_sides(thorax, neck, ARM_IDS)
    values, bent = arm({name: arms[:, j] for j, (name, _) in enumerate(ARM_POINTS)})
    for k, short in enumerate(("r", "l")):
        first = COLUMN[f"arm_flex_{short}"]
        out[:, first : first + 7] = values[k * n : (k + 1) * n]
        for i in np.flatnonzero(~bent[k * n : (k + 1) * n]):
            for name in ("arm_rot", "pro_sup", "wrist_flex", "wrist_dev"):
                out[i, COLUMN[f"{name}_{short}"]] = np.nan
                why[i][f"{name}_{short}"] = "the elbow is nearly straight: the arm's turn about its length is not seen"
    lumbar = zxy(np.einsum("pji,pjk->pik", pelvis, thorax))
    out[:, COLUMN["lumbar_extension"] : COLUMN["lumbar_extension"] + 3] = lumbar
    if up is None:
        for i in range(n):
            for name in ("lumbar_extension", "lumbar_bending", "lumbar_rotation"):
                out[i, COLUMN[name]] = np.nan
                why[i][name] = "no floor: the pelvis is stood along the trunk"
    return out, conf, why
