"""OpenSim and the files it works from: the model (Pose2Sim's, BSD-3, `OpenSim_Setup/` of the pose2sim wheel
that the README's command 1 installs), the COCO-133 marker set, and the scaling measurements and IK weights of its
setups, read here rather than run as setups (the track chooses its own frames and weights)."""

from __future__ import annotations

import importlib.util
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

from ..errors import Sapiens2StreamError

MODELS = {"simple": "Model_Pose2Sim_simple.osim", "full": "Model_Pose2Sim_muscles_flex.osim"}


def need_opensim():
    """The `opensim` module, or one line naming the extra that installs it."""
    try:
        import opensim
    except ImportError:
        raise Sapiens2StreamError("kinematics needs OpenSim: pip install -e '.[opensim]' (the opensim wheel)") from None
    opensim.Logger.removeFileSink()  # else its first message leaves an opensim.log in whatever folder the user is in
    opensim.Logger.setLevelString("error")  # its per-frame chatter is not the user's business
    return opensim


def setup_dir() -> Path:
    """Pose2Sim's OpenSim_Setup folder (found without importing Pose2Sim)."""
    spec = importlib.util.find_spec("Pose2Sim")
    folder = Path(spec.origin).parent / "OpenSim_Setup" if spec is not None and spec.origin else None
    if folder is None or not (folder / MODELS["simple"]).is_file():
        raise Sapiens2StreamError("kinematics needs Pose2Sim's OpenSim models: pip install --no-deps pose2sim==0.10.49")
    return folder


@dataclass(frozen=True)
class Measurement:
    """One scale factor: the mean ratio of the person's marker distances to the model's, applied to `bodies`
    (body name -> the axes scaled, "X Y Z" or a part of it)."""

    name: str
    pairs: tuple[tuple[str, str], ...]
    bodies: dict[str, str]


def measurements(folder: Path) -> list[Measurement]:
    """The measurements of Pose2Sim's COCO-133 scaling setup that it applies."""
    root = ET.parse(folder / "Scaling_Setup_Pose2Sim_Coco133.xml").getroot()
    out = []
    for m in root.iter("Measurement"):
        if (m.findtext("apply") or "").strip() != "true":
            continue
        pairs = tuple(tuple(p.text.split()) for p in m.iter("markers"))
        bodies = {b.get("name"): " ".join(b.findtext("axes").split()) for b in m.iter("BodyScale")}
        out.append(Measurement(m.get("name"), pairs, bodies))
    return out


def marker_weights(folder: Path) -> dict[str, float]:
    """Each marker's weight in Pose2Sim's COCO-133 IK setup."""
    root = ET.parse(folder / "IK_Setup_Pose2Sim_Coco133.xml").getroot()
    return {t.get("name"): float(t.findtext("weight")) for t in root.iter("IKMarkerTask")
            if (t.findtext("apply") or "true").strip() == "true"}  # fmt: skip


def coordinate_tasks(folder: Path) -> dict[str, tuple[float, float | None]]:
    """The IK setup's coordinate tasks (a coordinate kept near a value: the lumbar near straight): name ->
    (weight, value; None for the model's default)."""
    root = ET.parse(folder / "IK_Setup_Pose2Sim_Coco133.xml").getroot()
    out = {}
    for t in root.iter("IKCoordinateTask"):
        if (t.findtext("apply") or "true").strip() == "true":
            manual = (t.findtext("value_type") or "").strip() == "manual_value"
            out[t.get("name")] = (float(t.findtext("weight")), float(t.findtext("value")) if manual else None)
    return out
