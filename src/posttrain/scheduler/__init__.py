"""Which task runs next: the curriculum hook and its default."""

from posttrain.scheduler.curriculum import Curriculum, PassRateCurriculum, TaskStats, UniformCurriculum

__all__ = ["Curriculum", "PassRateCurriculum", "TaskStats", "UniformCurriculum"]
