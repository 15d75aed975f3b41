"""Which task runs next: the curriculum hook, its defaults, and the multi-domain task scheduler."""

from posttrain.scheduler.curriculum import Curriculum, PassRateCurriculum, TaskStats, UniformCurriculum
from posttrain.scheduler.task_scheduler import DomainSpec, Priority, SchedulerSettings, TaskScheduler

__all__ = ["Curriculum", "DomainSpec", "PassRateCurriculum", "Priority", "SchedulerSettings", "TaskScheduler",
           "TaskStats", "UniformCurriculum"]
