"""Profiler traces read without torch: `scaletrain analyze`.

trace_reader (a rank's trace as compact columns; trace_names.toml says what its events are),
intervals (time arithmetic), breakdown (one rank's time), stragglers (across ranks), analyze
(a folder of traces), report (text, JSON, plots).
"""
