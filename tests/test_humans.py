"""The synthetic humans' truth: keypoints where the pictures show the parts, a mirror that swaps sides only
through the body (no colour per side), consistent depth, pointmap and normals, and the clips' events."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from sapiens2_stream.humans.body import Pose, part_ids
from sapiens2_stream.humans.clips import crossing, fall, write_clip
from sapiens2_stream.humans.datasets import write_dataset
from sapiens2_stream.humans.motions import script
from sapiens2_stream.humans.render import Look, Person, Room, look_at, render
from sapiens2_stream.models.metadata import keypoint_index, pose_metadata, seg_metadata

W, H = 320, 240
ROOM = Room(noise=0.0, light=(0.0, -0.6, 0.8))  # lit from straight in front: a mirror keeps the light


def camera():
    return look_at(W, H, (0.0, -4.0, 1.2), (0.0, 0.0, 0.9))


def poses() -> list[Pose]:
    return [
        Pose(x=-0.9, yaw=0.4, arm=(0.5, -0.3), elbow=(0.9, 0.2), thigh=(0.3, -0.2), knee=(0.2, 0.6)),
        Pose(x=0.8, y=0.6, yaw=2.6, raise_arms=(2.7, 0.4), bend=0.3),
    ]


def mirror(pose: Pose) -> Pose:
    """The body a mirror in the plane x = 0 shows: sides swapped, turning and tipping reversed."""
    return replace(
        pose,
        x=-pose.x,
        yaw=-pose.yaw,
        tilt_dir=-pose.tilt_dir,
        thigh=pose.thigh[::-1],
        knee=pose.knee[::-1],
        arm=pose.arm[::-1],
        elbow=pose.elbow[::-1],
        raise_arms=pose.raise_arms[::-1],
    )


def test_keypoints_land_on_their_parts():
    view = render(camera(), [Person(i + 1, p) for i, p in enumerate(poses())], ROOM)
    ids, parts = keypoint_index(), part_ids()
    first = view.people[0]
    assert first.keypoints[ids["nose"], 2] == 2  # facing the camera: the nose is seen
    x, y = first.keypoints[ids["nose"], :2].astype(int)
    assert view.labels[y, x] == parts["Face_Neck"]
    checked = 0
    for p in view.people:
        for side in ("left", "right"):
            for joint, near in (("elbow", ("Upper_Arm", "Lower_Arm")), ("knee", ("Upper_Leg", "Lower_Leg"))):
                x, y, seen = p.keypoints[ids[f"{side}_{joint}"]]
                if seen == 2:  # a seen joint shows its own limb (its side's) around it
                    around = view.labels[int(y) - 1 : int(y) + 2, int(x) - 1 : int(x) + 2]
                    assert any((around == parts[f"{side.title()}_{n}"]).any() for n in near), (side, joint)
                    checked += 1
    assert checked >= 6
    for p in view.people:  # every seen keypoint inside its box, and the box around its pixels
        seen = p.keypoints[p.keypoints[:, 2] == 2, :2]
        x, y, w, h = p.box
        assert ((seen >= [x - 1, y - 1]) & (seen <= [x + w + 1, y + h + 1])).all()
    second = view.people[1]  # turned away: the face's keypoints are hidden behind the head
    assert second.keypoints[ids["nose"], 2] == 1


def test_a_mirrored_picture_is_the_picture_of_a_mirrored_body():
    looks = [Look(), Look(shirt=(200, 60, 60))]
    cam = camera()
    view = render(cam, [Person(i + 1, p, looks[i]) for i, p in enumerate(poses())], ROOM)
    other = render(cam, [Person(i + 1, mirror(p), looks[i]) for i, p in enumerate(poses())], ROOM)
    swap = np.asarray(seg_metadata().flip_indices)
    import cv2

    k = np.ones((3, 3), np.uint8)  # away from the edges, where the sub-pixel samples differ by half a pixel
    inside = cv2.dilate(other.labels, k) == cv2.erode(other.labels, k)
    same = (swap[view.labels[:, ::-1]] == other.labels)[inside & (other.labels > 0)].mean()
    assert same > 0.995, same
    body = inside & (other.labels > 0)  # (the floor's tiles are not symmetric about x = 0)
    assert np.abs(view.image[:, ::-1].astype(int) - other.image)[body].mean() < 2
    order = list(pose_metadata().flip_indices)
    for a, b in zip(view.people, other.people, strict=True):
        kp = a.keypoints[order]
        seen = (kp[:, 2] > 0) & (b.keypoints[:, 2] > 0)
        assert seen.sum() >= 15
        assert np.abs((W - 1 - kp[seen, 0]) - b.keypoints[seen, 0]).max() < 0.05
    # and the sides are not a matter of colour: the two arms of one body look alike
    parts = part_ids()
    left, right = view.labels == parts["Left_Upper_Arm"], view.labels == parts["Right_Upper_Arm"]
    assert np.abs(view.image[left].mean(0) - view.image[right].mean(0)).max() < 40


def test_depth_pointmap_normals_and_alpha_agree():
    view = render(camera(), [Person(1, poses()[0])], ROOM)
    person = view.owner == 0
    assert np.allclose(view.pointmap[..., 2], view.depth)
    norms = np.linalg.norm(view.normals, axis=-1)
    assert np.allclose(norms[person], 1, atol=1e-4)
    rays = view.pointmap[person] / np.linalg.norm(view.pointmap[person], axis=-1, keepdims=True)
    assert ((rays * view.normals[person]).sum(-1) < 0.05).mean() > 0.99  # surfaces face the camera
    assert 2.5 < np.median(view.depth[person]) < 4.5  # the body stands about 4 m away
    edge = (view.alpha > 0.05) & (view.alpha < 0.95)
    assert edge.sum() > 50 and view.alpha[person].mean() > 0.8  # anti-aliased rim, solid inside


def test_bodies_stand_on_the_floor_whatever_they_do():
    from sapiens2_stream.humans.body import capsules, joints

    for pose in (Pose(), Pose(crouch=1.0), Pose(sit=1.0), Pose(tilt=np.pi / 2), Pose(tilt=np.pi / 2, tilt_dir=np.pi)):
        j = joints(pose)
        lowest = min(min(a[2], b[2]) - r for a, b, r, _ in capsules(j, pose.size))
        assert abs(lowest) < 1e-6
    lying = joints(Pose(tilt=np.pi / 2))
    assert lying["head"][2] < 0.3 and joints(Pose())["head"][2] > 1.5


@pytest.mark.parametrize("scale", [1.0, 0.85, 1.1])
def test_the_body_stands_as_tall_as_its_scale_says_with_an_adults_proportions(scale):
    """Scale 1 is a 1.75 m adult to the crown (the top of the head), and every scale has an adult's proportions:
    heights over stature from anthropometric tables (Drillis and Contini, as Winter's Biomechanics gives them:
    eyes 0.936, shoulders 0.818, hips 0.530, knees 0.285, ankles 0.039), within 1.5 % of the stature. The eyes'
    share is what `calibrate people` turns into a height."""
    from sapiens2_stream.humans.body import HEAD_R, STATURE, joints

    pose = Pose(scale=scale)
    j = joints(pose)
    crown = j["head"][2] + HEAD_R * pose.size
    assert crown == pytest.approx(STATURE * scale, abs=1e-6) and STATURE == 1.75
    for name, share in (("eye", 0.936), ("shoulder", 0.818), ("hip", 0.530), ("knee", 0.285), ("ankle", 0.039)):
        for side in ("left", "right"):
            assert abs(j[f"{side}_{name}"][2] / crown - share) < 0.015, (name, j[f"{side}_{name}"][2] / crown)
    assert j["nose"][2] < j["left_eye"][2]


def test_scripts_chain_motions_and_know_their_falls():
    s = script(("walk", 2.0, 1.0), ("fall", 1.0), ("lie_still", 1.0), x=0.0, yaw=-np.pi / 2)
    assert s.pose(1.99).x == pytest.approx(2.0, abs=0.02)  # facing +X, a metre a second
    assert s.pose(2.5).x == pytest.approx(s.pose(3.5).x)  # no sliding once down
    assert s.falls() == [pytest.approx(2.7)]
    assert s.pose(3.5).tilt == pytest.approx(np.pi / 2)


def test_clips_write_video_and_truth(tmp_path):
    truth = write_clip(tmp_path / "cross.mp4", crossing(), fps=5)
    saved = json.loads((tmp_path / "cross.truth.json").read_text())
    assert len(saved["frames"]) == 30 and {p["id"] for p in saved["frames"][0]["people"]} == {1, 2}
    assert sorted(c["id"] for c in truth["crossings"]) == [1, 2]
    assert fall().people[0][1].falls() and write_clip(tmp_path / "f.mp4", fall(), fps=4)["falls"][0]["id"] == 1


def test_dataset_is_coco_with_masks(tmp_path):
    import cv2
    from pycocotools.coco import COCO

    write_dataset(tmp_path, 4, seed=3, progress=False)
    coco = COCO(str(tmp_path / "keypoints.json"))
    assert len(coco.getImgIds()) == 4 and coco.getAnnIds()
    labels = cv2.imread(str(tmp_path / "labels" / "000001.png"), cv2.IMREAD_UNCHANGED)
    alpha = cv2.imread(str(tmp_path / "alpha" / "000001.png"), cv2.IMREAD_UNCHANGED)
    assert labels.shape == alpha.shape == (240, 320) and labels.max() < 29
    assert ((labels > 0) == (alpha > 127)).mean() > 0.98


def test_the_room_made_once_per_camera_draws_the_same_pictures():
    """A clip makes each camera's rays and empty room once (two thirds of a frame's work) and draws every frame on
    them: the frames are those drawn from scratch, for two cameras taking turns, and the people drawn on one frame
    never show on the next."""
    from sapiens2_stream.humans.render import backdrop

    people = [Person(1, p, Look()) for p in poses()[:1]]
    cams = [camera(), look_at(W, H, (3.0, -5.0, 1.6), (0.0, 0.0, 0.9))]
    kept = [backdrop(c, ROOM) for c in cams]
    drawn = [render(c, people, ROOM, behind=b) for c, b in zip(cams * 2, kept * 2, strict=True)]
    fresh = [render(c, people, ROOM) for c in cams]
    for a, b in zip(drawn, fresh * 2, strict=True):
        assert np.array_equal(a.image, b.image) and np.array_equal(a.depth, b.depth)
        assert np.array_equal(a.labels, b.labels) and np.array_equal(a.normals, b.normals)
    empty = render(cams[0], [], ROOM, behind=kept[0])  # after people were drawn on the kept room
    assert np.array_equal(empty.image, render(cams[0], [], ROOM).image) and np.isfinite(empty.depth).all()
