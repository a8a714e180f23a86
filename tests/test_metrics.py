"""The scores `finetune` and `benchmarks.quality` report, on cases whose answer is known by hand."""

from __future__ import annotations

import numpy as np
import pytest

from sapiens2_stream.models.metadata import keypoint_index, pose_metadata
from sapiens2_stream.train.metrics import (
    event_scores,
    identity_scores,
    left_right_swaps,
    matte_scores,
    miou,
    oks_ap,
    pck,
)


def people(n: int = 4, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Truth [n, 308, 3] with the body's 17 COCO keypoints labelled, and boxes 100 px tall."""
    rng = np.random.default_rng(seed)
    truth = np.zeros((n, 308, 3))
    labelled = list(pose_metadata().coco17)
    truth[:, labelled, :2] = rng.uniform(0, 60, (n, len(labelled), 2)) + [20, 20]
    truth[:, labelled, 2] = 2
    boxes = np.tile([20.0, 20.0, 60.0, 100.0], (n, 1))
    return truth, boxes


def test_pck_counts_labelled_keypoints_within_a_share_of_the_box():
    truth, boxes = people()
    pred = truth[..., :2].copy()
    labelled = np.nonzero(truth[0, :, 2])[0]
    pred[:, labelled[:5], 0] += 7  # 0.07 of the 100 px side: within 0.1, not within 0.05
    assert pck(pred, truth, boxes, 0.1) == 1.0
    assert pck(pred, truth, boxes, 0.05) == pytest.approx(1 - 5 / 17)


def test_left_right_swaps_and_oks_ap():
    truth, boxes = people()
    pairs = pose_metadata().flip_pairs
    assert left_right_swaps(truth[..., :2], truth, boxes, pairs) == 0.0
    swapped = truth[:, list(pose_metadata().flip_indices)]
    assert left_right_swaps(swapped[..., :2], truth, boxes, pairs) == 1.0
    image_ids = np.arange(len(truth))
    scores = np.ones((len(truth), 308))
    assert oks_ap(truth[..., :2], scores, truth, boxes, image_ids) == pytest.approx(1.0)
    assert oks_ap(truth[..., :2] + 40, scores, truth, boxes, image_ids) == pytest.approx(0.0)
    nose = keypoint_index()["nose"]
    assert truth[0, nose, 2] == 2


def test_miou_and_matte_scores_by_hand():
    truth = [np.array([[0, 0, 1, 1], [0, 0, 1, 1]])]
    pred = [np.array([[0, 0, 0, 1], [0, 0, 1, 1]])]
    # class 0: intersection 4, union 5; class 1: 3 and 4
    assert miou(pred, truth, 29) == pytest.approx((4 / 5 + 3 / 4) / 2)
    alpha = np.zeros((10, 10))
    alpha[:, :5] = 1
    got = alpha.copy()
    got[:, 4] = 0.25
    s = matte_scores([got], [alpha])
    assert s["sad"] == pytest.approx(10 * 0.75 / 1000) and s["iou"] == pytest.approx(40 / 50)


def test_identity_scores_count_a_switch():
    frames = []
    for i in range(10):
        truth = {1: (10.0 * i, 0.0), 2: (100.0, 50.0)}
        tracks = {7 if i < 5 else 8: (10.0 * i + 1, 0.0), 9: (101.0, 50.0)}  # person 1's track changes once
        frames.append((truth, tracks))
    s = identity_scores(frames, 5)
    assert s["id_switches"] == 1
    # best one-to-one: 1 <-> 7 (5 frames) or 8 (5), 2 <-> 9 (10): IDTP 15 of 20 truth and 20 track boxes
    assert s["idf1"] == pytest.approx(2 * 15 / 40)


def test_event_scores_match_each_truth_once():
    s = event_scores([1.0, 1.2, 5.0], [1.1, 9.0], tolerance_s=0.5)
    assert s == {"precision": pytest.approx(1 / 3), "recall": 0.5, "hits": 1}
