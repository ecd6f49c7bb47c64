"""The hang watchdog, outside the training processes: in a generated job's batch shell
(`python -m scaletrain.launch.watchdog`) and in `scaletrain run`. No torch here.

stack_text (read faulthandler's dumps), collect (ask every rank for its stacks), verdict
(who stopped first), watch (the loop that decides and ends the training step).
"""
