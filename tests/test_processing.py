"""Pre- and post-processing against the transformers 5.23.0 Sapiens2ImageProcessor and closed-form oracles."""

from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from sapiens2_stream.models import load_model, pose_metadata, seg_metadata
from sapiens2_stream.processing import (
    composite,
    crop_persons,
    crop_windows,
    decode_heatmaps,
    heatmap_targets,
    mattes,
    merge_flip,
    metric_pointmaps,
    prepare_frames,
    resize_labels,
    seg_labels,
    unit_normals,
    with_flipped,
)

ONE_LEVEL = 1 / (255 * 0.224) + 1e-4  # one 8-bit level after ImageNet normalisation


@pytest.fixture(scope="module")
def processor():
    from transformers import Sapiens2ImageProcessor

    return Sapiens2ImageProcessor()


@pytest.fixture(scope="module")
def frames():
    rng = np.random.default_rng(0)
    return [rng.integers(0, 256, (480, 640, 3), dtype=np.uint8), rng.integers(0, 256, (300, 500, 3), dtype=np.uint8)]


BOXES = [[[100.0, 50, 200, 300], [300, 100, 40, 60], [600, 400, 100, 200]], [[10.0, 10, 480, 280]]]


def gaussian_heatmaps(n, k=308, h=256, w=192, seed=0):
    """Smooth single-peak heatmaps at random sub-pixel locations, plus a little noise."""
    g = torch.Generator().manual_seed(seed)
    cx, cy = torch.rand(n, k, generator=g) * (w - 1), torch.rand(n, k, generator=g) * (h - 1)
    yy, xx = torch.meshgrid(torch.arange(h).float(), torch.arange(w).float(), indexing="ij")
    peak = 0.5 + torch.rand(n, k, 1, 1, generator=g)
    hm = torch.exp(-((xx - cx[..., None, None]) ** 2 + (yy - cy[..., None, None]) ** 2) / 8) * peak
    return hm + 0.01 * torch.rand(n, k, h, w, generator=g)


def flat(boxes):
    return [b for image_boxes in boxes for b in image_boxes]


def test_crops_match_reference(processor, frames):
    """Shrinking (bilinear), enlarging (bicubic), partly outside the frame; two frame sizes in one batch."""
    expected = processor(frames, boxes=BOXES, return_tensors="pt").pixel_values
    crops = crop_persons(frames, BOXES)
    assert crops.pixel_values.shape == expected.shape == (4, 3, 1024, 768)
    assert (crops.pixel_values - expected).abs().max() < 1e-3
    assert crops.image_index.tolist() == [0, 0, 0, 1]
    assert torch.equal(crops.boxes, torch.tensor(flat(BOXES)))


def test_crops_accept_torch_frames_and_empty_box_lists(frames):
    as_torch = [torch.from_numpy(f) for f in frames]
    a = crop_persons(as_torch, [BOXES[0], []])
    b = crop_persons(frames[:1], BOXES[:1])
    assert torch.equal(a.pixel_values, b.pixel_values)
    empty = crop_persons(frames, [[], []])
    assert empty.pixel_values.shape == (0, 3, 1024, 768) and len(empty) == 0


def test_degenerate_boxes_give_finite_crops(frames):
    crops = crop_persons(frames[:1], [[[50.0, 50, 0, 0], [5000, 5000, 10, 10]]])
    assert torch.isfinite(crops.pixel_values).all()
    black = (0 - torch.tensor([0.485, 0.456, 0.406])) / torch.tensor([0.229, 0.224, 0.225])
    assert torch.allclose(crops.pixel_values[1, :, 500, 400], black, atol=1e-5)  # out of the image: black


def heatmap_pixels(keypoints, boxes, shape):
    """Image-pixel keypoints [N, K, 2] back to the heatmap pixels they were decoded from."""
    h, w = shape
    centres, sizes = crop_windows(torch.tensor(boxes, dtype=torch.float32))
    return (keypoints - centres[:, None] + sizes[:, None] / 2) / sizes[:, None] * torch.tensor([w - 1.0, h - 1])


def integer_peaks(heatmaps):
    n, k, h, w = heatmaps.shape
    flat_index = heatmaps.reshape(n, k, -1).argmax(-1)
    return torch.stack([flat_index % w, flat_index // w], -1).float()


def test_decode_matches_reference_on_peaked_heatmaps(processor):
    """Equal to the reference for every peak off the border. On the border the zero-padded blur moves the
    smoothed maximum inward, so the integer peak is no maximum of it: the reference then steps exactly half a
    pixel outward (its edge-replicated Newton step), ours keeps the integer peak."""
    heatmaps = gaussian_heatmaps(4)
    ref = processor.post_process_pose_estimation(SimpleNamespace(heatmaps=heatmaps), BOXES)
    keypoints, scores = decode_heatmaps(heatmaps, flat(BOXES))
    ref_kp = torch.stack([p["keypoints"] for image in ref for p in image])
    ref_scores = torch.stack([p["scores"] for image in ref for p in image])
    assert torch.equal(scores, ref_scores)
    peaks = integer_peaks(heatmaps)
    h, w = heatmaps.shape[-2:]
    border = (peaks == 0).any(-1) | (peaks[..., 0] == w - 1) | (peaks[..., 1] == h - 1)
    assert border.sum() > 0
    assert (keypoints - ref_kp).abs().amax(-1)[~border].max() < 0.01
    ours = heatmap_pixels(keypoints, flat(BOXES), (h, w)) - peaks
    assert ours[border].abs().max() <= 1.0


def smoothed_maximum(heatmaps, peaks):
    """Whether each integer peak is a maximum (negative definite Hessian) of the log of the heatmap smoothed as
    DARK does: OpenCV's 11x11 Gaussian with zero borders, finite differences with the edge replicated."""
    import cv2

    n, k, h, w = heatmaps.shape
    out = torch.zeros(n, k, dtype=torch.bool)
    for i in range(n):
        for j in range(k):
            m = heatmaps[i, j].numpy().astype(np.float64)
            blurred = cv2.GaussianBlur(m, (11, 11), 0, borderType=cv2.BORDER_CONSTANT)
            blurred *= m.max() / max(blurred.max(), 1e-30)
            logs = np.log(np.clip(np.pad(blurred, 1, mode="edge"), 1e-3, 50))
            x, y = int(peaks[i, j, 0]) + 1, int(peaks[i, j, 1]) + 1
            hxx = logs[y, x + 1] - 2 * logs[y, x] + logs[y, x - 1]
            hyy = logs[y + 1, x] - 2 * logs[y, x] + logs[y - 1, x]
            hxy = (logs[y + 1, x + 1] - logs[y + 1, x - 1] - logs[y - 1, x + 1] + logs[y - 1, x - 1]) / 4
            out[i, j] = bool(hxx < 0 and hxx * hyy - hxy**2 > 0)
    return out


def inside_own_peak(heatmaps, peaks, found):
    """Whether each found point [N, K, 2] (heatmap pixels) lies inside its map's peak: along the row and the column
    through the integer peak, strictly between the nearest pixels below half the peak's height above the median of
    that row and column (or half a pixel past the border), for a peak rising above it by a tenth of its value."""
    n, k, h, w = heatmaps.shape
    out = np.zeros((n, k), bool)
    for i in range(n):
        for j in range(k):
            m = heatmaps[i, j].numpy().astype(np.float64)
            x, y = int(peaks[i, j, 0]), int(peaks[i, j, 1])
            around = np.sort(np.concatenate([m[y], m[:, x]]))
            floor = around[(around.size - 1) // 2]  # the lower middle value, as torch's median
            level, ok = (m[y, x] + floor) / 2, m[y, x] - floor >= 0.1 * abs(m[y, x]) and m[y, x] > floor
            for line, at, value in ((m[y], x, float(found[i, j, 0])), (m[:, x], y, float(found[i, j, 1]))):
                below = np.flatnonzero(line < level)
                low = max([b for b in below if b < at], default=-0.5)
                high = min([b for b in below if b > at], default=len(line) - 0.5)
                ok = ok and low < value < high
            out[i, j] = ok
    return torch.from_numpy(out)


def test_decode_matches_reference_where_its_step_is_a_refinement_and_is_bounded_elsewhere(processor, tiny_dir):
    """Random weights give flat, multi-modal maps. Where the reference's DARK step is a real refinement (a
    maximum, under one heatmap pixel) we agree with it within 0.01 px, but for DARK's ill-conditioned near-saddles
    where a 1e-6 difference in the blur moves the point or tips the maximum test. Where it is not, the reference throws
    keypoints far off the picture and ours stay within one heatmap pixel of the integer peak or inside the peak's own
    half-height extent. "A real refinement" and "inside its peak" are judged by independent oracles (OpenCV's blur,
    NumPy's differences; a sort and a walk along the row and the column)."""
    model = load_model(tiny_dir["pose"])
    with torch.inference_mode():
        heatmaps = model(torch.randn(4, 3, 1024, 768, generator=torch.Generator().manual_seed(1))).heatmaps
    ref = processor.post_process_pose_estimation(SimpleNamespace(heatmaps=heatmaps), BOXES)
    keypoints, scores = decode_heatmaps(heatmaps, flat(BOXES))
    ref_kp = torch.stack([p["keypoints"] for image in ref for p in image])
    assert torch.equal(scores, torch.stack([p["scores"] for image in ref for p in image]))
    shape = heatmaps.shape[-2:]
    peaks = integer_peaks(heatmaps)
    ref_step = (heatmap_pixels(ref_kp, flat(BOXES), shape) - peaks).abs().amax(-1)
    our_step = (heatmap_pixels(keypoints, flat(BOXES), shape) - peaks).abs().amax(-1)
    refining = (ref_step < 0.99) & smoothed_maximum(heatmaps, peaks)
    assert refining.sum() > 100 and (~refining).sum() > 100  # both sides are exercised
    agree = (keypoints - ref_kp).abs().amax(-1) < 0.01
    kept = our_step < 1e-3  # the integer peak kept: a borderline maximum (determinant ~0) judged otherwise here
    assert agree[refining].float().mean() > 0.98 and (agree | kept)[refining].float().mean() > 0.995
    wide = our_step > 1.0 + 1e-4  # more than a pixel: only inside the peak it belongs to
    found = heatmap_pixels(keypoints, flat(BOXES), shape)
    assert (
        wide.sum() < 0.05 * wide.numel()
        and inside_own_peak(heatmaps[wide.any(-1)], peaks[wide.any(-1)], found[wide.any(-1)])[wide[wide.any(-1)]].all()
    )
    assert ref_step.max() > 100  # the reference's unbounded step: what this departure is for


def degenerate_heatmaps(h=64, w=48):
    """Flat, nearly flat, clipped, saddle-shaped, edge, two-peak and ridge maps: [1, 7, h, w]."""
    g = torch.Generator().manual_seed(3)
    yy, xx = torch.meshgrid(torch.arange(h).float(), torch.arange(w).float(), indexing="ij")
    flat_map = torch.full((h, w), 0.2)
    nearly_flat = 0.2 + 1e-7 * torch.rand(h, w, generator=g)
    clipped = (80 * torch.exp(-((xx - 20.3) ** 2 + (yy - 30.6) ** 2) / 200)).clamp(max=60)  # a plateau above 50
    saddle = 0.5 + 1e-3 * ((xx - 24) ** 2 - (yy - 32) ** 2)
    saddle[32, 24] += 1e-4  # the argmax sits on the saddle
    edge = torch.exp(-((xx + 0.7) ** 2 + (yy - 10.2) ** 2) / 8)  # the peak lies past the left edge
    two_peaks = torch.exp(-((xx - 10) ** 2 + (yy - 10) ** 2) / 8) + torch.exp(-((xx - 13) ** 2 + (yy - 10) ** 2) / 8)
    ridge = torch.exp(-((yy - 40.4) ** 2) / 8) * (1 + 1e-6 * xx)  # flat along x
    return torch.stack([flat_map, nearly_flat, clipped, saddle, edge, two_peaks, ridge])[None]


def test_decode_keeps_degenerate_peaks_within_one_heatmap_pixel_and_the_crop_window():
    heatmaps = degenerate_heatmaps()
    boxes = [[100.0, 50, 200, 300]]
    keypoints, _ = decode_heatmaps(heatmaps, boxes)
    step = heatmap_pixels(keypoints, boxes, heatmaps.shape[-2:]) - integer_peaks(heatmaps)
    assert torch.isfinite(keypoints).all() and step.abs().max() <= 1.0 + 1e-4
    centres, sizes = crop_windows(torch.tensor(boxes))
    pixel = sizes / torch.tensor([47.0, 63])  # one heatmap pixel in image pixels
    low, high = centres - sizes / 2 - pixel, centres + sizes / 2 + pixel
    assert ((keypoints[0] >= low) & (keypoints[0] <= high)).all()


def test_decode_still_refines_real_peaks_next_to_degenerate_ones():
    """A clean Gaussian in the same batch as degenerate maps still decodes to its sub-pixel centre."""
    h, w = 64, 48
    yy, xx = torch.meshgrid(torch.arange(h).float(), torch.arange(w).float(), indexing="ij")
    clean = torch.exp(-((xx - 17.3) ** 2 + (yy - 22.8) ** 2) / 8)[None, None]
    heatmaps = torch.cat([degenerate_heatmaps(), clean], 1)
    boxes = [[0.0, 0, 47, 63]]
    keypoints, _ = decode_heatmaps(heatmaps, boxes)
    found = heatmap_pixels(keypoints, boxes, (h, w))[0, -1]
    assert (found - torch.tensor([17.3, 22.8])).abs().max() < 0.01


def wide_noisy_heatmaps(n, k=308, h=64, w=48, seed=0):
    """Wide, low Gaussian peaks (sigma 2-4 heatmap px, amplitude 0.3-1.3) plus noise (0.01): the argmax of a wide,
    low peak may sit more than a pixel from its centre. Also their true centres [n, k, 2]."""
    g = torch.Generator().manual_seed(seed)
    cx, cy = 4 + torch.rand(n, k, generator=g) * (w - 9), 4 + torch.rand(n, k, generator=g) * (h - 9)
    sigma = 2 + 2 * torch.rand(n, k, 1, 1, generator=g)
    amplitude = 0.3 + torch.rand(n, k, 1, 1, generator=g)
    yy, xx = torch.meshgrid(torch.arange(h).float(), torch.arange(w).float(), indexing="ij")
    hm = amplitude * torch.exp(-((xx - cx[..., None, None]) ** 2 + (yy - cy[..., None, None]) ** 2) / (2 * sigma**2))
    return hm + 0.01 * torch.randn(n, k, h, w, generator=g), torch.stack([cx, cy], -1)


def test_decode_refines_wide_low_noisy_peaks_as_the_reference_does(processor):
    """Before: about 0.7% of these kept their integer peak (a step over one pixel was refused), up to 1.2 heatmap px
    from the centre where the reference lands within 0.11. Now every keypoint matches the reference within 0.01 px
    or is closer to the true centre than the reference's."""
    heatmaps, truth = wide_noisy_heatmaps(4)
    boxes = [[[0.0, 0, 47, 63]]] * 4
    ref = processor.post_process_pose_estimation(SimpleNamespace(heatmaps=heatmaps), boxes)
    ref_kp = torch.stack([p["keypoints"] for image in ref for p in image])
    keypoints, _ = decode_heatmaps(heatmaps, flat(boxes))
    shape = heatmaps.shape[-2:]
    ours, theirs = heatmap_pixels(keypoints, flat(boxes), shape), heatmap_pixels(ref_kp, flat(boxes), shape)
    far = (ours - integer_peaks(heatmaps)).abs().amax(-1) > 1.0  # the steps the old bound refused
    assert far.sum() > 0  # the case is exercised
    agree = (keypoints - ref_kp).abs().amax(-1) < 0.01
    closer = (ours - truth).norm(dim=-1) < (theirs - truth).norm(dim=-1)
    assert (agree | closer).all(), (keypoints - ref_kp).abs().amax(-1)[~(agree | closer)]


def test_targets_then_decode_round_trip():
    """Known keypoints -> UDP Gaussian targets -> decode -> the same points."""
    boxes = torch.tensor([[100.0, 50, 200, 300], [300, 100, 40, 60], [0, 0, 700, 300]])
    centres, sizes = crop_windows(boxes)
    g = torch.Generator().manual_seed(0)
    truth = centres[:, None] + (torch.rand(3, 308, 2, generator=g) - 0.5) * sizes[:, None] * 0.9
    heatmaps, weights = heatmap_targets(torch.cat([truth, torch.ones(3, 308, 1)], -1), boxes)
    keypoints, scores = decode_heatmaps(heatmaps, boxes)
    assert weights.all()
    assert (keypoints - truth).abs().max() < 0.01
    assert scores.min() > 0.95


def test_targets_match_reference():
    from transformers.models.sapiens2.image_processing_sapiens2 import generate_udp_gaussian_heatmaps

    boxes = torch.tensor([[100.0, 50, 200, 300], [300, 100, 40, 60]])
    g = torch.Generator().manual_seed(2)
    kp = torch.cat([torch.rand(2, 308, 2, generator=g) * 500, (torch.rand(2, 308, 1, generator=g) > 0.2).float()], -1)
    kp[0, :5, :2] = -500  # far outside the crop: weight 0
    ref_h, ref_w = generate_udp_gaussian_heatmaps([boxes.tolist()], [kp.tolist()], (1024, 768), 4, 6.0)
    heatmaps, weights = heatmap_targets(kp, boxes)
    assert (heatmaps - torch.stack(ref_h)).abs().max() < 1e-6
    assert torch.equal(weights, torch.stack(ref_w)) and weights[0, :5].sum() == 0


def test_seg_labels_resized_nearest_invent_no_classes():
    labels = torch.zeros(1, 64, 48, dtype=torch.long)
    labels[:, 20:40, 10:30] = 20
    resized = resize_labels(labels, (101, 77))
    assert set(resized.unique().tolist()) == {0, 20}


# ------------------------------------------------------------------------------------------- full frames, dense


@pytest.mark.parametrize("keep_aspect", [False, True])
def test_prepare_frames_matches_reference(processor, frames, keep_aspect):
    expected = processor(frames, do_pad=keep_aspect, return_tensors="pt").pixel_values
    batch = prepare_frames(frames, keep_aspect=keep_aspect)
    assert (batch.pixel_values - expected).abs().max() <= ONE_LEVEL  # antialiased resize rounding: one level
    assert batch.source_sizes == [(480, 640), (300, 500)]
    if keep_aspect:
        assert batch.content == [(224, 0, 576, 768), (282, 0, 460, 768)]


def test_seg_postprocessing_matches_reference(processor, frames):
    batch = prepare_frames(frames)
    logits = torch.randn(2, 29, 64, 48)
    ref = processor.post_process_semantic_segmentation(
        SimpleNamespace(logits=logits), target_sizes=batch.source_sizes, return_segmentation_scores=True
    )
    ours = seg_labels(logits, batch, return_scores=True)
    for (labels, scores), r in zip(ours, ref, strict=True):
        assert (scores - r["segmentation_scores"]).abs().max() < 1e-5
        assert (labels == r["segmentation"]).float().mean() > 0.9999


def test_normals_are_unit_and_point_like_reference(processor, frames):
    batch = prepare_frames(frames, keep_aspect=True)
    normals = torch.randn(2, 3, 1024, 768)
    ref = processor.post_process_normal_estimation(SimpleNamespace(normals=normals), source_sizes=batch.source_sizes)
    ours = unit_normals(normals, batch)
    for n, r in zip(ours, ref, strict=True):
        assert n.shape == r["normals"].shape
        assert torch.allclose(n.norm(dim=0), torch.ones(()), atol=1e-5)  # the reference's are shorter after resize
        assert (n - F.normalize(r["normals"], dim=0, eps=1e-8)).abs().max() < 1e-4


def test_pointmaps_match_reference(processor, frames):
    batch = prepare_frames(frames, keep_aspect=True)
    out = SimpleNamespace(pointmaps=torch.randn(2, 3, 1024, 768), scales=torch.rand(2, 1) + 0.5)
    ref = processor.post_process_pointmap_estimation(out, source_sizes=batch.source_sizes)
    for ours, r in zip(metric_pointmaps(out.pointmaps, out.scales, batch), ref, strict=True):
        assert (ours - r["pointmap"]).abs().max() < 1e-4


def test_matting_composite_matches_reference_and_closed_form(processor, frames):
    batch = prepare_frames(frames[:1])
    g = torch.Generator().manual_seed(0)
    alpha = torch.rand(1, 1, 1024, 768, generator=g)
    fg = alpha * torch.rand(1, 3, 1024, 768, generator=g)  # premultiplied
    background = np.full((480, 640, 3), (0, 177, 64), dtype=np.uint8)
    ref = processor.post_process_image_matting(
        SimpleNamespace(alphas=alpha, foregrounds=fg), target_sizes=[(480, 640)], backgrounds=[background]
    )[0]["composite"]
    ((a, f),) = mattes(alpha, fg, batch)
    ours = composite(a, f, (0, 177, 64))
    assert (ours.permute(2, 0, 1).int() - ref.int()).abs().max() <= 1
    # closed form: opaque -> foreground, transparent -> background
    ones, zeros = torch.ones(1, 4, 4), torch.zeros(1, 4, 4)
    red = torch.tensor([1.0, 0, 0]).view(3, 1, 1).expand(3, 4, 4)
    assert composite(ones, red, (0, 0, 255))[0, 0].tolist() == [255, 0, 0]
    assert composite(zeros, 0 * red, (0, 0, 255))[0, 0].tolist() == [0, 0, 255]
    blurred = composite(torch.zeros(1, 480, 640), torch.zeros(3, 480, 640), "blur", frame=frames[0])
    assert blurred.shape == (480, 640, 3) and blurred.float().std() < torch.from_numpy(frames[0]).float().std()


@pytest.mark.parametrize("k", [3, 31])
def test_blur_background_is_two_box_filters(k):
    """The GPU path of the "blur" background (running sums in torch, run here on CPU tensors) equals OpenCV's box
    filter, twice, with replicated edges (an independent oracle, and what the CPU path uses)."""
    import cv2

    from sapiens2_stream.processing.dense import box_blur_background, box_blur_on_device

    frame = torch.rand(3, 37, 53, generator=torch.Generator().manual_seed(k))  # odd sizes, k near the size
    ours = box_blur_on_device(frame, k).permute(1, 2, 0).numpy()
    assert np.abs(ours - box_blur_background(frame, strength=k).permute(1, 2, 0).numpy()).max() < 1e-5
    image = frame.permute(1, 2, 0).numpy()
    for _ in range(2):
        image = cv2.blur(image, (k, k), borderType=cv2.BORDER_REPLICATE)
    assert np.abs(ours - image).max() < 1e-5


# -------------------------------------------------------------------------------------------------- flip TTA


def test_pose_flip_tta_matches_reference_flip_pairs(tiny_dir):
    """Our one-forward-of-2N TTA equals the reference's two forwards with flip_pairs, averaged."""
    from tests.reference import reference_model

    ref = reference_model("pose")
    ours = load_model(ref.state_dict())
    x = torch.randn(2, 3, 64, 48)
    pairs = torch.tensor(pose_metadata().flip_pairs)
    with torch.inference_mode():
        expected = (ref(x).heatmaps + ref(x.flip(-1), flip_pairs=pairs).heatmaps) / 2
        merged = merge_flip(ours(with_flipped(x)).heatmaps, "channels", pose_metadata().flip_indices)
    assert (merged - expected).abs().max() < 1e-5


@pytest.mark.parametrize(
    "task,field,kind",
    [("pose", "heatmaps", "channels"), ("seg", "logits", "channels"), ("normal", "normals", "vectors"),
     ("pointmap", "pointmaps", "vectors"), ("pointmap", "scales", "scalar"), ("matting", "alphas", "channels")],
)  # fmt: skip
def test_mirrored_input_gives_mirrored_channel_swapped_output(tiny_dir, task, field, kind):
    """TTA is equivariant: TTA(mirror(x)) == unflip(TTA(x)), channels swapped left/right."""
    from sapiens2_stream.processing.flip import unflip_channels, unflip_vectors

    model = load_model(tiny_dir[task])
    order = {"pose": pose_metadata().flip_indices, "seg": seg_metadata().flip_indices}.get(task)
    x = torch.randn(1, 3, 256, 192, generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        tta = merge_flip(getattr(model(with_flipped(x)), field), kind, order)
        tta_mirrored = merge_flip(getattr(model(with_flipped(x.flip(-1))), field), kind, order)
    expected = {"channels": lambda t: unflip_channels(t, order), "vectors": unflip_vectors, "scalar": lambda t: t}
    assert (tta_mirrored - expected[kind](tta)).abs().max() < 1e-4
