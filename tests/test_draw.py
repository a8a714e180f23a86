"""Drawing: the released colours land where the keypoints, parts and boxes are, and nowhere else."""

import numpy as np

from sapiens2_stream.io.draw import draw_box, draw_pose, draw_seg, palette_image
from sapiens2_stream.models import pose_metadata, seg_metadata


def test_pose_drawn_in_released_colours_and_low_scores_skipped():
    meta = pose_metadata()
    frame = np.zeros((400, 300, 3), np.uint8)
    rng = np.random.default_rng(0)
    keypoints = rng.uniform(20, 280, (308, 2))
    scores = np.ones(308)
    scores[0] = 0.1  # nose below threshold
    keypoints[0] = (10, 390)  # alone in a corner
    keypoints[5] = (150, 200)  # left shoulder
    draw_pose(frame, keypoints, scores)
    assert tuple(frame[200, 150]) == meta.colors[5]
    assert frame[385:395, 5:15].sum() == 0


def test_seg_overlay_uses_palette_and_leaves_background():
    frame = np.full((50, 60, 3), 100, np.uint8)
    labels = np.zeros((50, 60), np.int64)
    labels[10:20, 10:20] = 22  # torso
    out = draw_seg(frame.copy(), labels, opacity=1.0)
    assert tuple(out[15, 15]) == seg_metadata().palette[22]
    assert (out[30:, 30:] == 100).all()
    assert palette_image(labels)[0, 0].tolist() == list(seg_metadata().palette[0])


def test_box_with_label():
    frame = np.zeros((200, 200, 3), np.uint8)
    draw_box(frame, (50, 60, 80, 100), label="id 7")
    assert frame[60:160, 50].any() and frame[100, 100].sum() == 0
    assert frame[40:60, 50:100].any()  # the label tab above the box


def test_matte_composite_made_once_and_never_drawn_on():
    """The composite video, the annotated video and the window share one composite per frame; drawing boxes on the
    annotated copy leaves the shared one (what the composite video writes) clean."""
    from sapiens2_stream.io.sources import Frame
    from sapiens2_stream.io.video_sinks import annotate, matte_composite
    from sapiens2_stream.runtime.results import FrameResult, Person

    alpha = np.zeros((120, 160), np.float32)
    alpha[20:100, 40:120] = 1.0
    foreground = np.zeros((120, 160, 3), np.float32)
    foreground[20:100, 40:120] = (1.0, 1.0, 1.0)  # a white person, premultiplied
    frame = Frame(0, 0.0, 0.0, np.full((120, 160, 3), 90, np.uint8))
    result = FrameResult(frame, [Person(1, np.array([40.0, 20, 80, 80]), 0.9)], alpha=alpha, foreground=foreground)
    green = (0, 177, 64)

    first = matte_composite(result, green)
    assert tuple(first[60, 80]) == (255, 255, 255) and tuple(first[5, 5]) == green
    drawn = annotate(result, ["matting", "boxes"], 0.3, green)
    assert (drawn != first).any()  # the box is on the annotated frame...
    assert matte_composite(result, green) is first and tuple(first[20, 40]) == (255, 255, 255)  # ...not on the shared


def test_normals_as_colours_closed_form():
    from sapiens2_stream.io.draw import normals_image

    normals = np.array([[[0, 0, 1], [1, 0, 0], [0, -1, 0]]], np.float32)  # facing the camera, right, up (y down)
    assert normals_image(normals).tolist() == [[[128, 128, 255], [255, 128, 128], [128, 0, 128]]]


def test_depth_colours_near_warm_far_cool_and_survive_holes():
    from sapiens2_stream.io.draw import depth_image

    depth = np.tile(np.linspace(1.0, 5.0, 100, dtype=np.float32), (10, 1))  # nearer on the left
    depth[0, 50] = np.nan  # a hole in the pointmap
    image = depth_image(depth).astype(int)
    near, far = image[5, 5], image[5, 95]
    assert near[0] > near[2] and far[2] > far[0]  # red near, blue far
    assert image.shape == (10, 100, 3) and (image[0, 50] == image[0, 99]).all()  # a hole drawn as far


def test_a_skeleton_is_as_thick_as_its_person_is_tall_and_the_face_cloud_only_when_asked():
    def drawn(height: float, every_point: bool = False) -> tuple[int, int]:
        """(the shoulder-elbow line's width, the face's ink) of a person `height` pixels tall."""
        kp, scores = np.zeros((308, 2)), np.zeros(308)
        kp[[5, 7, 13]] = [(100, 20), (100, 20 + 0.3 * height), (100, 20 + height)]  # shoulder, elbow, ankle
        kp[70:] = np.column_stack([np.linspace(20, 40, 238), np.full(238, 30.0)])  # the 238 face landmarks
        scores[[5, 7, 13]] = scores[70:] = 1
        frame = draw_pose(np.zeros((400, 200, 3), np.uint8), kp, scores, every_point=every_point)
        row = int(20 + 0.15 * height)
        return int((frame[row, 80:120].sum(-1) > 0).sum()), int(frame[20:40, 15:45].sum())

    thin, no_face = drawn(80)
    thick, _ = drawn(320)
    _, with_face = drawn(320, every_point=True)
    assert thick >= 2 * thin  # a near person's lines read from afar; a far one stays a thin figure
    assert no_face == 0 < with_face  # the 238 face landmarks as dots only when asked
