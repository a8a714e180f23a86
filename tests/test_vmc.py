"""3-D people streamed live over OSC: VMC bundles as VSeeFace, Unity (EVMC4U) and Blender receive them, and plain
OSC; received by a python-osc server in the test."""

from __future__ import annotations

import threading
import time

import numpy as np
from pythonosc.dispatcher import Dispatcher
from pythonosc.osc_server import BlockingOSCUDPServer

from sapiens2_stream.export.motion3d import ARMATURE, joint_positions
from sapiens2_stream.export.vmc import SWAP, UNITY_BONES, OscSender
from sapiens2_stream.threed import Person3D
from tests import scenes3d as S


def matrix(x: float, y: float, z: float, w: float) -> np.ndarray:
    return np.array([
        [1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
        [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
        [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)],
    ])  # fmt: skip


class Receiver:
    """A VMC/OSC receiver on 127.0.0.1: every message, grouped into the bundles they came in (one datagram at a
    time, in order, as an avatar application reads them: a server with a thread per datagram mixed two bundles'
    messages on a busy host)."""

    def __init__(self) -> None:
        self.bundles: list[list] = [[]]
        dispatcher = Dispatcher()
        dispatcher.set_default_handler(self.take)
        self.server = BlockingOSCUDPServer(("127.0.0.1", 0), dispatcher)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def take(self, address: str, *arguments) -> None:
        self.bundles[-1].append((address, arguments))
        if address in ("/VMC/Ext/T", "/sapiens2/frame"):  # each bundle ends with it
            self.bundles.append([])

    def close(self) -> None:
        self.server.shutdown()


def person(t: float, yaw: float) -> Person3D:
    pose = S.walking(t) if t < 1 else S.crouching(t)
    pose.yaw += yaw
    return Person3D(1, S.world_truth([pose])[0], np.ones(308), ["cam1", "cam2"])


def test_vmc_bundles_put_an_avatar_where_the_person_is():
    """One bundle per frame with the root, the 18 other humanoid bones, OK and the time; forward kinematics of the
    received local rotations and positions (Unity's left-handed Y up) puts every joint within 1 cm of ours."""
    receiver = Receiver()
    try:
        sender = OscSender([f"127.0.0.1:{receiver.port}"], kind="vmc")
        frames = [person(i / 10, 0.3 * i) for i in range(20)]
        for i, p in enumerate(frames):
            sender.send([p], i / 10)
        deadline = time.time() + 10
        while len(receiver.bundles) <= len(frames) and time.time() < deadline:
            time.sleep(0.05)
    finally:
        receiver.close()
    bundles = receiver.bundles[:-1]
    assert len(bundles) == len(frames)
    parent_of = {UNITY_BONES[j.name]: UNITY_BONES[j.parent] for j in ARMATURE[1:]}
    worst = 0.0
    for bundle, p in zip(bundles, frames, strict=True):
        addresses = [a for a, _ in bundle]
        assert addresses[0] == "/VMC/Ext/Root/Pos" and addresses[-2:] == ["/VMC/Ext/OK", "/VMC/Ext/T"]
        assert addresses.count("/VMC/Ext/Bone/Pos") == len(ARMATURE) - 1
        root = bundle[0][1]
        assert root[0] == "root" and all(isinstance(v, float) for v in root[1:])
        position, rotation = {"Hips": np.array(root[1:4])}, {"Hips": matrix(*root[4:8])}
        for _, arguments in bundle[1:-2]:
            name, local_position, local_rotation = arguments[0], np.array(arguments[1:4]), matrix(*arguments[4:8])
            parent = parent_of[name]
            position[name] = position[parent] + rotation[parent] @ local_position
            rotation[name] = rotation[parent] @ local_rotation
        ours = joint_positions(p.xyz[None])
        for joint in ARMATURE:
            worst = max(worst, np.linalg.norm(position[UNITY_BONES[joint.name]] - SWAP @ ours[joint.name][0]))
    print(f"avatar joints: worst {worst * 1000:.2f} mm")
    assert worst <= 0.01


def test_plain_osc_sends_every_persons_markers():
    receiver = Receiver()
    try:
        sender = OscSender([f"127.0.0.1:{receiver.port}"], kind="osc")
        a, b = person(0.5, 0.0), person(0.5, 1.0)
        b.id = 7
        sender.send([a, b], 0.5)
        deadline = time.time() + 10
        while len(receiver.bundles) < 2 and time.time() < deadline:
            time.sleep(0.05)
    finally:
        receiver.close()
    messages = dict(receiver.bundles[0])
    assert messages["/sapiens2/frame"] == (0.5, 2)
    assert np.allclose(messages["/sapiens2/person/7/LShoulder"], b.xyz[5], atol=1e-5)
    assert "/sapiens2/person/1/RKnee" in messages
