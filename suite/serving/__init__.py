"""The serving core in three rooms: request (parameters, status, output), planner (decides each
step), engine (runs it); `suite.scheduler.Scheduler` is their front door."""
