"""Calibration boards: where a board's corners are on the board (metres) and where they are in a picture.

A checkerboard is named by its inner corners (`9x6`: the corners where four squares meet, as OpenCV and Pose2Sim
count them) and found with OpenCV's sector-based detector (`findChessboardCornersSB`, accurate to a fraction of a
pixel on its own and robust to blur and uneven light; the classic detector where it fails), its corners then refined
on the picture (`cornerSubPix`, 5x5). A picture at least `HALVED_FROM` pixels high is first looked at once at half
size: on OpenCV's 640x480 stereo photos every board is found that way, 4-5x faster, the refined corners within
0.002 px of those found at full size (the refinement converges to the same corner from a pixel away); a picture
without the board costs a sixth more. A
ChArUco board is named by its squares (`7x5`) and found by its markers, so a board seen only in part still gives
the corners it shows, each with its id.
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np

from ..errors import Sapiens2StreamError

# tried in turn: normalising the picture finds some boards and loses others
SECTOR_FLAGS = (cv2.CALIB_CB_EXHAUSTIVE | cv2.CALIB_CB_ACCURACY,
                cv2.CALIB_CB_EXHAUSTIVE | cv2.CALIB_CB_ACCURACY | cv2.CALIB_CB_NORMALIZE_IMAGE)  # fmt: skip
GRID_SHARE = 0.4  # a detection whose corners stray this share of a square from the grid is a wrong one
HALVED_FROM = 480  # picture height from which the board is first looked for at half size (squares stay visible)
HALF_FLAGS = cv2.CALIB_CB_ACCURACY  # that look: all 26 stereo photos' boards in 24 ms each
CLASSIC_FLAGS = cv2.CALIB_CB_ADAPTIVE_THRESH | cv2.CALIB_CB_NORMALIZE_IMAGE  # the older detector, last
REFINE = ((5, 5), (-1, -1), (cv2.TERM_CRITERIA_EPS + cv2.TERM_CRITERIA_MAX_ITER, 30, 1e-3))  # window, zero zone,
# criteria: OpenCV's own regression calibration of its stereo set refines with a 5x5 window


@dataclass(frozen=True)
class Found:
    """One view of the board: `image` [N, 2] pixels of the corners seen, `ids` [N] their indices into the board's
    `corners()`."""

    image: np.ndarray
    ids: np.ndarray

    def object_points(self, board: Board) -> np.ndarray:
        return board.corners()[self.ids]


@dataclass(frozen=True)
class Board:
    """`kind` checkerboard (`cols` x `rows` inner corners) or charuco (`cols` x `rows` squares, `marker` the side
    of a marker, `dictionary` an OpenCV ArUco dictionary such as DICT_4X4_50); `square` the side of a square,
    metres."""

    kind: str
    cols: int
    rows: int
    square: float
    marker: float = 0.0
    dictionary: str = ""

    def describe(self) -> str:
        if self.kind == "checkerboard":
            return f"a {self.cols}x{self.rows} checkerboard (inner corners), {self.square * 1000:g} mm squares"
        return (f"a {self.cols}x{self.rows} ChArUco board, {self.square * 1000:g} mm squares, "
                f"{self.marker * 1000:g} mm {self.dictionary} markers")  # fmt: skip

    def corners(self) -> np.ndarray:
        """[N, 3] every corner on the board, metres, the board's plane z = 0 (row by row)."""
        if self.kind == "charuco":
            return np.asarray(self._charuco().getChessboardCorners(), np.float64).reshape(-1, 3)
        x, y = np.meshgrid(np.arange(self.cols), np.arange(self.rows))
        return np.stack([x.ravel(), y.ravel(), np.zeros(x.size)], 1) * self.square

    def find(self, gray: np.ndarray) -> Found | None:
        """The board's corners in a grey picture, or None where it is not seen (a ChArUco board: fewer than six
        corners)."""
        if self.kind == "charuco":
            corners, ids, _, _ = cv2.aruco.CharucoDetector(self._charuco()).detectBoard(gray)
            if ids is None or len(ids) < 6:
                return None
            return Found(corners.reshape(-1, 2).astype(np.float64), ids.ravel().astype(int))
        corners = self._checkerboard(gray)
        if corners is None:
            return None
        corners = cv2.cornerSubPix(gray, corners.astype(np.float32), *REFINE).reshape(-1, 2).astype(np.float64)
        return Found(self._first_square_light(gray, corners), np.arange(self.cols * self.rows))

    def _checkerboard(self, gray: np.ndarray) -> np.ndarray | None:
        if gray.shape[0] >= HALVED_FROM:  # one quick look at half size (the corners are refined at full size)
            half = cv2.resize(gray, None, fx=0.5, fy=0.5, interpolation=cv2.INTER_AREA)
            ok, corners, _ = cv2.findChessboardCornersSBWithMeta(half, (self.cols, self.rows), HALF_FLAGS)
            if ok and self._on_grid(corners):
                return corners * 2
        for flags in SECTOR_FLAGS:
            ok, corners, _ = cv2.findChessboardCornersSBWithMeta(gray, (self.cols, self.rows), flags)
            if ok and self._on_grid(corners):
                return corners
        ok, corners = cv2.findChessboardCorners(gray, (self.cols, self.rows), CLASSIC_FLAGS)
        return corners if ok and self._on_grid(corners) else None

    def _on_grid(self, corners: np.ndarray) -> bool:
        """Whether the corners lie on the board's grid seen in perspective: none further than GRID_SHARE of a square
        from the homography through them all (a lens bends them by a tenth or two; the sector-based detector now
        and then returns a board with one line of corners on the wrong line of squares, a whole square off)."""
        grid = np.mgrid[0 : self.cols, 0 : self.rows].T.reshape(-1, 2).astype(np.float64)
        seen = corners.reshape(-1, 2).astype(np.float64)
        h, _ = cv2.findHomography(grid, seen, 0)
        if h is None:
            return False
        square = np.median(np.linalg.norm(np.diff(seen.reshape(self.rows, self.cols, 2), axis=1), axis=2))
        stray = np.linalg.norm(cv2.perspectiveTransform(grid[None], h)[0] - seen, axis=1)
        return bool(stray.max() < GRID_SHARE * square)

    def _first_square_light(self, gray: np.ndarray, corners: np.ndarray) -> np.ndarray:
        """The corners in one order whichever detector found them: the first inner square light (the sector-based
        detector's order; the classic one may start from the far corner, which would pair one camera's corner
        with another's opposite one). A board that looks the same turned half round cannot say, and is left."""
        grid = corners.reshape(self.rows, self.cols, 2)

        def shade(row: int, col: int) -> float:
            centre = grid[row : row + 2, col : col + 2].reshape(-1, 2).mean(0)
            return float(cv2.getRectSubPix(gray, (5, 5), (float(centre[0]), float(centre[1]))).mean())

        return corners[::-1].copy() if shade(0, 0) < shade(0, 1) else corners

    def _charuco(self):
        dictionary = cv2.aruco.getPredefinedDictionary(getattr(cv2.aruco, self.dictionary))
        return cv2.aruco.CharucoBoard((self.cols, self.rows), self.square, self.marker, dictionary)


def board_from(kind: str, corners: str | None, squares: str | None, square: float | None, marker: float | None,
               dictionary: str | None) -> Board:  # fmt: skip
    """The board the command line describes, every missing or impossible part said in one line."""
    if square is None or square <= 0:
        raise Sapiens2StreamError("--square: give the side of a board square in metres (e.g. 0.025)")
    if kind == "checkerboard":
        cols, rows = grid(corners, "--corners", "inner corners, e.g. 9x6")
        if cols < 3 or rows < 3:
            raise Sapiens2StreamError(f"--corners {corners}: a checkerboard needs at least 3x3 inner corners")
        return Board("checkerboard", cols, rows, square)
    cols, rows = grid(squares, "--squares", "squares, e.g. 7x5")
    if marker is None or not 0 < marker < square:
        raise Sapiens2StreamError("--marker: give the side of a marker in metres, smaller than --square")
    name = dictionary or ""
    if not name.startswith("DICT_") or not hasattr(cv2.aruco, name):
        known = ", ".join(n for n in dir(cv2.aruco) if n.startswith("DICT_4X4") or n.startswith("DICT_5X5"))
        raise Sapiens2StreamError(f"--dictionary {dictionary!r}: an OpenCV ArUco dictionary such as {known}")
    return Board("charuco", cols, rows, square, marker, name)


def grid(text: str | None, flag: str, what: str) -> tuple[int, int]:
    try:
        cols, rows = (int(v) for v in (text or "").lower().split("x"))
    except ValueError:
        raise Sapiens2StreamError(f"{flag} {text!r}: expected COLSxROWS {what}") from None
    return cols, rows
