"""Inside the training processes: `st.profile` (profiler), the step clock, and the
instrumented entry that applies them to an unchanged script:
`python -m scaletrain.observe.profile.instrument train.py ...`.

spec (which ranks and steps; read on the login node too, no torch), profiler, step_clock
and step_clock_files (its files, read without torch), instrument.
"""
