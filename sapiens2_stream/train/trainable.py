"""Which tasks `finetune` trains: those of the task table whose kind of truth it knows (`TaskSpec.truth`). Light on
purpose: the command line's parser asks it without importing the trainer."""

from __future__ import annotations

from ..models.tasks import TASKS

TRAINABLE = ("keypoints", "classes", "alpha", "normals", "points")  # the kinds of truth finetune learns from


def trainable_tasks() -> list[str]:
    return [name for name, spec in TASKS.items() if spec.truth in TRAINABLE]
