"""People in metres from one camera: the lifter (pose + pointmap -> 3-D keypoints), the camera's intrinsics, the
floor and world frame, and the files motion-capture tools read (TRC, C3D, BVH) (imported when first used: reading
a pipeline file needs only `threed.options`)."""

from ..lazy import lazy_names

__getattr__ = lazy_names(__name__, {"estimate_intrinsics": ".camera", "Lifter": ".lifter", "Person3D": ".triangulate",
                                    "Triangulator": ".triangulate"})  # fmt: skip
__all__ = ["Lifter", "Person3D", "Triangulator", "estimate_intrinsics"]
