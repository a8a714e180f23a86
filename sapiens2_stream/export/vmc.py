"""People's 3-D keypoints live into 3-D applications over OSC/UDP (python-osc).

- **VMC** (the Virtual Motion Capture protocol, as VSeeFace, Warudo, Unity's EVMC4U and Blender's VMC add-ons
  receive it): one OSC bundle per frame with the root (`/VMC/Ext/Root/Pos`: the hips' position and rotation), each
  humanoid bone's local position and rotation (`/VMC/Ext/Bone/Pos`, Unity's HumanBodyBones names), then
  `/VMC/Ext/OK 1` and `/VMC/Ext/T time`. Rotations are relative to a T-pose (the rest VRM avatars are made in:
  `motion3d.T_POSE`) and solved by the same armature solver as the BVH files; local positions are this frame's
  bone vectors in that T-pose. Coordinates are Unity's: left-handed, Y up, metres; from our world frame
  (right-handed, Z up) that is (x, y, z) -> (x, z, y), and a rotation R becomes M R M with M that swap.
- **Plain OSC** for TouchDesigner, Max and the like: `/sapiens2/person/<id>/<joint> x y z` per HALPE_26 marker (our
  world frame, metres), then `/sapiens2/frame time people`.

Every argument is a Python float, int or str (python-osc rejects numpy types).
"""

from __future__ import annotations

import numpy as np

from .motion3d import ARMATURE, HALPE_26_NAMES, joint_positions, markers, solve_armature

UNITY_BONES = {
    "Hips": "Hips", "LeftUpLeg": "LeftUpperLeg", "LeftLeg": "LeftLowerLeg", "LeftFoot": "LeftFoot",
    "LeftToe": "LeftToes", "RightUpLeg": "RightUpperLeg", "RightLeg": "RightLowerLeg", "RightFoot": "RightFoot",
    "RightToe": "RightToes", "Spine": "Spine", "Chest": "Chest", "LeftArm": "LeftUpperArm",
    "LeftForeArm": "LeftLowerArm", "LeftHand": "LeftHand", "RightArm": "RightUpperArm",
    "RightForeArm": "RightLowerArm", "RightHand": "RightHand", "Neck": "Neck", "Head": "Head",
}  # fmt: skip
SWAP = np.array([[1.0, 0, 0], [0, 0, 1.0], [0, 1.0, 0]])  # our world (RH, Z up) <-> Unity (LH, Y up)


def quaternion(r: np.ndarray) -> tuple[float, float, float, float]:
    """(x, y, z, w) of a rotation matrix."""
    w = np.sqrt(max(0.0, 1 + r[0, 0] + r[1, 1] + r[2, 2])) / 2
    x = np.copysign(np.sqrt(max(0.0, 1 + r[0, 0] - r[1, 1] - r[2, 2])) / 2, r[2, 1] - r[1, 2])
    y = np.copysign(np.sqrt(max(0.0, 1 - r[0, 0] + r[1, 1] - r[2, 2])) / 2, r[0, 2] - r[2, 0])
    z = np.copysign(np.sqrt(max(0.0, 1 - r[0, 0] - r[1, 1] + r[2, 2])) / 2, r[1, 0] - r[0, 1])
    return float(x), float(y), float(z), float(w)


def vmc_messages(xyz: np.ndarray, time_s: float) -> list[tuple[str, list]] | None:
    """One frame of one person ([308, 3] world keypoints) as VMC messages (address, arguments), or None when the
    armature's joints are not all there."""
    positions = joint_positions(xyz[None])  # [1, 3] per joint: one frame
    try:
        offsets, rotations = solve_armature(positions, t_pose=True)
    except ValueError:
        return None
    hips = SWAP @ positions["Hips"][0]
    out = [("/VMC/Ext/Root/Pos", ["root", *map(float, hips), *quaternion(SWAP @ rotations["Hips"][0] @ SWAP)])]
    for joint in ARMATURE[1:]:
        local = rotations[joint.parent][0].T @ rotations[joint.name][0]
        out.append(("/VMC/Ext/Bone/Pos", [UNITY_BONES[joint.name], *map(float, SWAP @ offsets[joint.name]),
                                          *quaternion(SWAP @ local @ SWAP)]))  # fmt: skip
    out += [("/VMC/Ext/OK", [1]), ("/VMC/Ext/T", [float(time_s)])]
    return out


def osc_messages(people: list, time_s: float) -> list[tuple[str, list]]:
    """Plain OSC: every person's HALPE_26 markers (world frame, metres), then the frame's time and head count."""
    out = []
    for person in people:
        for name, point in zip(HALPE_26_NAMES, markers(person.xyz[None])[0], strict=True):
            if np.isfinite(point).all():
                out.append((f"/sapiens2/person/{int(person.id)}/{name}", [float(v) for v in point]))
    out.append(("/sapiens2/frame", [float(time_s), len(people)]))
    return out


class OscSender:
    """Bundles to each `host:port` over UDP: VMC (`kind="vmc"`, the first person, or the one with `person_id`) or
    plain OSC (`kind="osc"`, everyone)."""

    def __init__(self, targets: list[str], kind: str = "vmc", person_id: int | None = None) -> None:
        from pythonosc.udp_client import UDPClient

        self.kind, self.person_id = kind, person_id
        self.clients = []
        for target in targets:
            host, _, port = target.rpartition(":")
            self.clients.append(UDPClient(host or "127.0.0.1", int(port)))
        self.sent = 0

    def send(self, people: list, time_s: float) -> None:
        if self.kind == "vmc":
            chosen = [p for p in people if self.person_id is None or p.id == self.person_id][:1]
            messages = vmc_messages(chosen[0].xyz, time_s) if chosen else None
        else:
            messages = osc_messages(people, time_s)
        if not messages:
            return
        bundle = build_bundle(messages)
        for client in self.clients:
            client.send(bundle)
        self.sent += 1


def build_bundle(messages: list[tuple[str, list]]):
    from pythonosc.osc_bundle_builder import IMMEDIATELY, OscBundleBuilder
    from pythonosc.osc_message_builder import OscMessageBuilder

    bundle = OscBundleBuilder(IMMEDIATELY)
    for address, arguments in messages:
        message = OscMessageBuilder(address=address)
        for argument in arguments:
            message.add_arg(argument)
        bundle.add_content(message.build())
    return bundle.build()
