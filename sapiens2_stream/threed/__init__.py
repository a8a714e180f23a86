"""People in metres from one camera: the lifter (pose + pointmap -> 3-D keypoints), the camera's intrinsics, the
floor and world frame, and the files motion-capture tools read (TRC, C3D, BVH)."""

from .camera import estimate_intrinsics
from .lifter import Lifter
from .triangulate import Person3D, Triangulator

__all__ = ["Lifter", "Person3D", "Triangulator", "estimate_intrinsics"]
