"""Converters of what runs wrote into the formats other tools read: Pose2Sim projects."""
