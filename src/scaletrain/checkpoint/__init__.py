"""Checkpoints: save and resume the whole training state, stop cleanly before a time limit.

Modules, one job each:

- checkpointer: the user's API (`st.Checkpointer`), which the rest serves.
- what is saved: state (the training objects and each rank's generators), deepspeed_state
  (ZeRO's partitions as DCP shards), manifest (checkpoint.json and checksums).
- how it is written: writer (save + atomic publish, background saves), storage (the storage
  a run uses), dcp_storage (the default: DCP's public API), direct/ (the opt-in engine on
  private torch entry points), torch_compat (what differs between torch versions),
  process_switches (what a save turns off while it runs).
- how it is read: resume (the newest intact checkpoint), safe_load (no arbitrary
  unpickling), export (one file of the model's weights).
- when: interval (how often to save by default), schedule (when to save, and the vote in
  which ranks agree), stop (stop requests and the stop handshake with job scripts).
- layout (folders, LATEST, retention); rehearsal (`submit --rehearse` inside the job).

Nothing is imported here: layout, manifest, interval, schedule and stop need no torch at
import and are read by login-node tools; `scaletrain.Checkpointer` loads the torch part on
first use.
"""
