"""A person's 3-D keypoints as the files motion-capture tools open: TRC (OpenSim, Pose2Sim), C3D (Vicon, Visual3D,
Mokka, ezc3d) and BVH (Blender, MotionBuilder, game engines).

Every file is in the run's world frame (metres, Z up, the floor at Z = 0: `threed.floor`), converted to what each
format's readers expect:

- TRC: Pose2Sim's HALPE_26 markers (what its OpenSim models use), metres, Y up: TRC (X, Y, Z) = world (Y, Z, X),
  as Pose2Sim writes its own (`zup2yup`). A marker missing in a frame is left empty, as OpenSim reads it.
- C3D: the same markers in millimetres, Z up (the C3D custom); a missing marker has a residual of -1.
- BVH: an armature with one bone length per track (the median over its frames) and joint rotations solved from
  the keypoints, frame by frame; Y up, as Blender's importer expects by default (`axis_up='Y'`,
  `axis_forward='-Z'`), which puts it back into the world frame as it was. Joints with several children (hips,
  chest) turn with the frame their children make (the line between the two hips or shoulders, and up towards
  the next joint); a zero-length Spine and Neck then point the body and head; every other joint swings its one
  child into place. With the bone lengths fixed, every joint lands where the keypoints put it, give or take how
  much the track's bone lengths wobble.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..config import DEFAULT_FPS
from ..io import track_files
from ..threed.floor import FloorFinder, transform, world_from_camera
from .skeletons import HALPE_26, Layout, Point

HALPE_26_NAMES = ("Nose", "LEye", "REye", "LEar", "REar", "LShoulder", "RShoulder", "LElbow", "RElbow", "LWrist",
                  "RWrist", "LHip", "RHip", "LKnee", "RKnee", "LAnkle", "RAnkle", "Head", "Neck", "Hip", "LBigToe",
                  "RBigToe", "LSmallToe", "RSmallToe", "LHeel", "RHeel")  # fmt: skip


def markers(xyz: np.ndarray, layout: list[Point] = HALPE_26) -> np.ndarray:
    """[T, M, 3] markers from [T, 308, 3] keypoints (NaN where a source keypoint is NaN), through the same
    `skeletons.Layout` matrix the 2-D export uses."""
    matrix = Layout(layout)
    out = np.einsum("mk,tkd->tmd", matrix.weights, np.nan_to_num(xyz))
    missing = (np.isnan(xyz).any(-1)[:, None, :] & matrix.uses[None]).any(-1)  # [T, M]
    out[missing] = np.nan
    return out


def rate_of(times: np.ndarray, default: float = DEFAULT_FPS) -> float:
    span = times[-1] - times[0] if len(times) > 1 else 0.0
    return (len(times) - 1) / span if span > 0 else default


def write_trc(path: Path, times: np.ndarray, points: np.ndarray, names: tuple[str, ...]) -> None:
    """OpenSim TRC: [T, M, 3] world points (metres, Z up) written Y up, times from the track's first frame."""
    track_files.write_trc(path, times - times[0], points[..., [1, 2, 0]], names, units="m", digits=5)


def write_c3d(path: Path, times: np.ndarray, points: np.ndarray, names: tuple[str, ...]) -> None:
    """C3D: [T, M, 3] world points (metres, Z up) in millimetres, Z up."""
    import c3d

    writer = c3d.Writer(point_rate=float(rate_of(times)), point_units="mm  ")
    writer.set_point_labels([n.ljust(16)[:16] for n in names])
    frames = []
    for frame in points:
        cells = np.zeros((len(frame), 5), np.float32)
        seen = np.isfinite(frame).all(1)
        cells[seen, :3] = frame[seen] * 1000.0
        cells[~seen, 3] = -1.0  # residual -1: not seen
        frames.append((cells, np.zeros((0, 0), np.float32)))
    writer.add_frames(frames)
    with open(path, "wb") as handle, warnings.catch_warnings():
        warnings.filterwarnings("ignore", "No analog data", UserWarning)  # markers only: that is the point
        writer.write(handle)


# ----------------------------------------------------------------------------------------------------- BVH


@dataclass(frozen=True)
class Joint:
    name: str
    parent: str | None
    at: Point | None  # where it is (None: at its parent, a zero-length bone that only turns)


def _mid(a: str, b: str) -> Point:
    return Point(((a, 0.5), (b, 0.5)))


def _at(name: str) -> Point:
    return Point(((name, 1.0),))


ARMATURE = (
    Joint("Hips", None, _mid("left_hip", "right_hip")),
    Joint("LeftUpLeg", "Hips", _at("left_hip")), Joint("LeftLeg", "LeftUpLeg", _at("left_knee")),
    Joint("LeftFoot", "LeftLeg", _at("left_ankle")), Joint("LeftToe", "LeftFoot", _at("left_big_toe")),
    Joint("RightUpLeg", "Hips", _at("right_hip")), Joint("RightLeg", "RightUpLeg", _at("right_knee")),
    Joint("RightFoot", "RightLeg", _at("right_ankle")), Joint("RightToe", "RightFoot", _at("right_big_toe")),
    Joint("Spine", "Hips", None), Joint("Chest", "Spine", _mid("left_shoulder", "right_shoulder")),
    Joint("LeftArm", "Chest", _at("left_shoulder")), Joint("LeftForeArm", "LeftArm", _at("left_elbow")),
    Joint("LeftHand", "LeftForeArm", _at("left_wrist")), Joint("RightArm", "Chest", _at("right_shoulder")),
    Joint("RightForeArm", "RightArm", _at("right_elbow")), Joint("RightHand", "RightForeArm", _at("right_wrist")),
    Joint("Neck", "Chest", None), Joint("Head", "Neck", _at("nose")),
)  # fmt: skip
# joints that turn with the frame of two children (the line between them, and up towards a third point)
FRAMED = {"Hips": ("LeftUpLeg", "RightUpLeg", "Chest"), "Chest": ("LeftArm", "RightArm", "Head")}
ZUP_TO_BVH = np.array([[1.0, 0, 0], [0, 0, 1.0], [0, -1.0, 0]])  # world (X, Y, Z) -> BVH (X, Z, -Y): Y up


def joint_positions(xyz: np.ndarray) -> dict[str, np.ndarray]:
    """[T, 3] world positions of each armature joint from [T, 308, 3] world keypoints."""
    out: dict[str, np.ndarray] = {}
    for joint in ARMATURE:
        out[joint.name] = out[joint.parent] if joint.at is None else markers(xyz, [joint.at])[:, 0]
    return out


def children(name: str) -> list[Joint]:
    return [j for j in ARMATURE if j.parent == name]


def basis(first: np.ndarray, second: np.ndarray, up: np.ndarray) -> np.ndarray:
    """A rotation whose x axis runs from `second` to `first` and whose z axis leans towards `up`."""
    x = first - second
    x = x / np.linalg.norm(x)
    z = up - (up @ x) * x
    z = z / np.linalg.norm(z)
    return np.stack([x, np.cross(z, x), z], axis=1)


def swing(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The smallest rotation that turns direction a onto direction b."""
    a, b = a / np.linalg.norm(a), b / np.linalg.norm(b)
    v, c = np.cross(a, b), float(a @ b)
    if c < -1 + 1e-9:  # opposite: half a turn about any axis square to a
        axis = np.cross(a, [1.0, 0, 0]) if abs(a[0]) < 0.9 else np.cross(a, [0, 1.0, 0])
        axis /= np.linalg.norm(axis)
        return 2 * np.outer(axis, axis) - np.eye(3)
    k = np.array([[0, -v[2], v[1]], [v[2], 0, -v[0]], [-v[1], v[0], 0]])
    return np.eye(3) + k + k @ k / (1 + c)


def zxy_degrees(r: np.ndarray) -> tuple[float, float, float]:
    """Euler angles (Z, X, Y) in degrees with R = Rz Rx Ry, the BVH channel order `Zrotation Xrotation Yrotation`."""
    x = np.arcsin(np.clip(r[2, 1], -1.0, 1.0))
    if abs(r[2, 1]) < 1 - 1e-9:
        z = np.arctan2(-r[0, 1], r[1, 1])
        y = np.arctan2(-r[2, 0], r[2, 2])
    else:  # gimbal lock: put it all on Z
        z, y = np.arctan2(r[1, 0], r[0, 0]), 0.0
    return float(np.degrees(z)), float(np.degrees(x)), float(np.degrees(y))


T_POSE = {  # a T-pose facing +Y (Z up): the rest VMC avatars (VRM) are made in; the body's left is -X
    "LeftUpLeg": (-1, 0, 0), "LeftLeg": (0, 0, -1), "LeftFoot": (0, 0, -1), "LeftToe": (0, 1, 0),
    "RightUpLeg": (1, 0, 0), "RightLeg": (0, 0, -1), "RightFoot": (0, 0, -1), "RightToe": (0, 1, 0),
    "Spine": (0, 0, 0), "Chest": (0, 0, 1), "LeftArm": (-1, 0, 0), "LeftForeArm": (-1, 0, 0), "LeftHand": (-1, 0, 0),
    "RightArm": (1, 0, 0), "RightForeArm": (1, 0, 0), "RightHand": (1, 0, 0), "Neck": (0, 0, 0), "Head": (0, 0, 1),
}  # fmt: skip


def solve_armature(
    positions: dict[str, np.ndarray], t_pose: bool = False
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Rest offsets (world axes, each bone at its track's median length) and global rotations [T, 3, 3] per joint
    that put every joint where `positions` has it. The rest is the first complete frame's pose, or with `t_pose`
    the T-pose of `T_POSE` (what VMC receivers' avatars rest in)."""
    t_len = len(positions["Hips"])
    complete = np.all([np.isfinite(p).all(1) for p in positions.values()], axis=0)
    if not complete.any():
        raise ValueError("no frame with every joint of the armature")
    rest_frame = int(np.argmax(complete))
    offsets: dict[str, np.ndarray] = {"Hips": np.zeros(3)}
    for joint in ARMATURE[1:]:
        delta = positions[joint.name] - positions[joint.parent]
        length = np.nanmedian(np.linalg.norm(delta, axis=1))
        first = np.array(T_POSE[joint.name], np.float64) if t_pose else delta[rest_frame]
        norm = np.linalg.norm(first)
        offsets[joint.name] = first / norm * length if norm > 1e-9 else np.zeros(3)
    rest = {"Hips": positions["Hips"][rest_frame]}
    for joint in ARMATURE[1:]:
        rest[joint.name] = rest[joint.parent] + offsets[joint.name]
    rotations = {j.name: np.tile(np.eye(3), (t_len, 1, 1)) for j in ARMATURE}
    for t in range(t_len):
        if not complete[t]:  # held: a frame without every joint keeps the previous pose
            for name in rotations:
                rotations[name][t] = rotations[name][t - 1] if t else np.eye(3)
            continue
        for joint in ARMATURE:
            parent = np.eye(3) if joint.parent is None else rotations[joint.parent][t]
            kids = children(joint.name)
            if joint.name in FRAMED:
                a, b, up = FRAMED[joint.name]
                now = basis(positions[a][t], positions[b][t], positions[up][t] - positions[joint.name][t])
                then = basis(rest[a], rest[b], rest[up] - rest[joint.name])
                rotations[joint.name][t] = now @ then.T
            elif len(kids) == 1 and np.linalg.norm(offsets[kids[0].name]) > 1e-9:
                child = kids[0].name
                target = positions[child][t] - positions[joint.name][t]
                rotations[joint.name][t] = swing(parent @ offsets[child], target) @ parent
            else:
                rotations[joint.name][t] = parent
    return offsets, rotations


def write_bvh(path: Path, times: np.ndarray, xyz: np.ndarray) -> None:
    """BVH of one track: [T, 308, 3] world keypoints (metres, Z up), written Y up in metres."""
    positions = joint_positions(xyz)
    offsets, rotations = solve_armature(positions)
    lines = ["HIERARCHY"]

    def emit(joint: Joint, depth: int) -> None:
        pad = "  " * depth
        offset = ZUP_TO_BVH @ offsets[joint.name]
        if joint.parent is None:
            lines.extend([f"ROOT {joint.name}", "{", f"  OFFSET {0:.6f} {0:.6f} {0:.6f}",
                          "  CHANNELS 6 Xposition Yposition Zposition Zrotation Xrotation Yrotation"])  # fmt: skip
        else:
            lines.extend([f"{pad}JOINT {joint.name}", f"{pad}{{",
                          f"{pad}  OFFSET {offset[0]:.6f} {offset[1]:.6f} {offset[2]:.6f}",
                          f"{pad}  CHANNELS 3 Zrotation Xrotation Yrotation"])  # fmt: skip
        kids = children(joint.name)
        for kid in kids:
            emit(kid, depth + 1)
        if not kids:  # an end site a tenth of the bone on, along it
            tip = offset * 0.1 if np.linalg.norm(offset) > 1e-9 else np.array([0.0, 0.05, 0.0])
            lines.extend([f"{pad}  End Site", f"{pad}  {{", f"{pad}    OFFSET {tip[0]:.6f} {tip[1]:.6f} {tip[2]:.6f}",
                          f"{pad}  }}"])  # fmt: skip
        lines.append(f"{pad}}}")

    emit(ARMATURE[0], 0)
    hips = positions["Hips"]
    lines.extend(["MOTION", f"Frames: {len(times)}", f"Frame Time: {1.0 / rate_of(times):.6f}"])
    last_root = np.zeros(3)
    for t in range(len(times)):
        root = hips[t] if np.isfinite(hips[t]).all() else last_root
        last_root = root
        values = list(ZUP_TO_BVH @ root)
        for joint in ARMATURE:
            parent = np.eye(3) if joint.parent is None else rotations[joint.parent][t]
            local = ZUP_TO_BVH @ (parent.T @ rotations[joint.name][t]) @ ZUP_TO_BVH.T
            values.extend(zxy_degrees(local))
        lines.append(" ".join(f"{v:.5f}" for v in values))
    path.write_text("\n".join(lines) + "\n")


# ----------------------------------------------------------------------------------------------------- a run's


def write_mocap(folder: Path, tracks: Mapping[int, tuple], world: np.ndarray | None, frame: str, formats: list[str],
                about: dict) -> list[Path]:  # fmt: skip
    """world.json and tracks_3d/track_NNNN.{trc,c3d,bvh} in `folder`. `tracks`: track id -> (times [T], camera-frame
    keypoints [T, 308, 3], confidences [T, 308]), read one track at a time (a spool on disk may serve them); `world`:
    the 4x4 world-from-camera transform (None: the files stay in the camera's frame); `frame`: what the world frame
    is ("floor", "calibration", "camera")."""
    if not tracks:
        return []
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    world = np.eye(4) if world is None else world
    (folder / "world.json").write_text(json.dumps({"world_from_camera": np.round(world, 6).tolist(), "frame": frame,
                                                   "units": "m", "up": "Z", **about}, indent=1))  # fmt: skip
    out = folder / "tracks_3d"
    out.mkdir(exist_ok=True)
    written = []
    for track_id in sorted(tracks):
        times, xyz, confidence = tracks[track_id]
        points = transform(world, np.asarray(xyz, np.float64))
        points[np.asarray(confidence) <= 0] = np.nan
        written += write_track(out / f"track_{track_id:04d}", np.asarray(times, np.float64), points, formats)
    return written


def write_track(stem: Path, times: np.ndarray, xyz: np.ndarray, formats: list[str]) -> list[Path]:
    """One track's files from its [T, 308, 3] world keypoints."""
    points, written = markers(xyz), []
    if "trc" in formats:
        write_trc(stem.with_suffix(".trc"), times, points, HALPE_26_NAMES)
        written.append(stem.with_suffix(".trc"))
    if "c3d" in formats:
        write_c3d(stem.with_suffix(".c3d"), times, points, HALPE_26_NAMES)
        written.append(stem.with_suffix(".c3d"))
    if "bvh" in formats and len(times) >= 2:
        try:
            write_bvh(stem.with_suffix(".bvh"), times, xyz)
            written.append(stem.with_suffix(".bvh"))
        except ValueError:  # never a frame with the whole body: no armature to write
            pass
    return written


def mocap_from_run(run: Path, output: Path | None, formats: list[str]) -> list[Path]:
    """`export mocap`: the files a run with `threed` writes, from a finished run's results.jsonl (its
    `keypoints_3d`), the floor found again over the whole run."""
    from ..errors import Sapiens2StreamError
    from ..io.records import read_frames

    path = Path(run) / "results.jsonl"
    if not path.exists():
        raise Sapiens2StreamError(f"{run}: no results.jsonl (not a run's output folder)")
    tracks: dict[int, list] = {}
    floor = FloorFinder()
    for record in read_frames(path):
        for p in record.people:
            if p.keypoints_3d is None:
                continue
            tracks.setdefault(p.track_id, []).append((record.pts, p.keypoints_3d, p.keypoints_3d_confidence))
            floor.add(p.keypoints_3d[None], p.keypoints_3d_confidence[None])
    if not tracks:
        raise Sapiens2StreamError(f"{run}: its records have no keypoints_3d (run it with pose and pointmap models)")
    plane = floor.fit()
    world = None if plane is None else world_from_camera(*plane)
    arrays = {t: tuple(np.array(c) for c in zip(*rows, strict=True)) for t, rows in tracks.items()}
    about = {"camera_height_m": round(plane[1], 3)} if plane is not None else {}
    return write_mocap(Path(output or run), arrays, world, "floor" if plane is not None else "camera", formats, about)
