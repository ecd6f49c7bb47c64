# shellcheck shell=bash disable=SC2154  # $run_dir: set by the job script that sources this
# The functions every scaletrain job script calls, the same for every job: its history, its
# waits, its requeues. Sourced by job.sbatch from the run folder's programs/, where `scaletrain
# submit` writes it (launch/job_programs.py). Plain bash, for the batch shell: scontrol and
# sbatch exist there, not in a container. What to do after a hang is decided in Python by the
# watchdog (launch/watchdog/requeue.py), which writes it as key=value lines (hang.env).
# Reads $run_dir, set by the job script, and Slurm's variables.

# One line of the run's job history (jobs.jsonl): event, job id, the time, more fields.
job_event() {
    printf '{"event": "%s", "job_id": "%s", "time": "%s"%s}\n' "$1" "$2" \
        "$(date -u +%Y-%m-%dT%H:%M:%S+00:00)" "$3" >>"$run_dir/jobs.jsonl"
}

# Slurm requeues a job by itself after a node failure or a preemption: record it, with the
# reason Slurm wrote at the end of the previous run's output ("CANCELLED ... DUE TO NODE
# FAILURE" from the node, or srun's "Node failure on <node>"; nothing when the batch node
# itself died). The requeues of these functions are recorded before they happen.
record_slurm_requeue() {
    local restarts=${SLURM_RESTART_COUNT:-0} reason
    if ((restarts > 0)) && ! grep -F "\"job_id\": \"$SLURM_JOB_ID\"" "$run_dir/jobs.jsonl" 2>/dev/null |
        grep -q "\"restart_count\": ${restarts}[,}]"; then
        reason=$(tail -n 50 "$run_dir/logs/$SLURM_JOB_NAME-$SLURM_JOB_ID.out" 2>/dev/null |
            grep -o -e 'DUE TO [A-Z][A-Z ]*[A-Z]' -e 'Node failure' | tail -n 1)
        reason=${reason#DUE TO }
        job_event requeued "$SLURM_JOB_ID" ", \"restart_count\": $restarts, \"by\": \"slurm\", \"reason\": \"${reason,,}\""
    fi
}

# Wait for a background process ($1) until it has ended, and return its exit status: the
# USR1 trap interrupts `wait`.
wait_for() {
    local status
    while wait "$1"; status=$?; kill -0 "$1" 2>/dev/null; do :; done
    return "$status"
}

# Training stopped at a checkpoint: back into the queue, where it resumes from that
# checkpoint, unless the job was requeued $1 times already (--max-requeues). Ends the script.
requeue_after_stop() {
    local restarts=${SLURM_RESTART_COUNT:-0}
    if ((restarts >= $1)); then
        echo "scaletrain: stopped at a checkpoint, not requeued: the job was requeued $restarts times (--max-requeues $1). Submit the run again to continue it." >&2
        return
    fi
    echo "scaletrain: stopped at a checkpoint; requeueing job $SLURM_JOB_ID (restart $((restarts + 1)) of at most $1)" >&2
    # Recorded first: Slurm ends this script moments after the requeue.
    job_event requeued "$SLURM_JOB_ID" ", \"restart_count\": $((restarts + 1))"
    scontrol requeue "$SLURM_JOB_ID" && exit 0
    echo "scaletrain: could not requeue job $SLURM_JOB_ID (see above). Submit the run again to continue it." >&2
    exit 1
}

# The watchdog ended a hung training step: requeue as it decided in hang.env (requeue,
# exclude, changed, restart_count, event, message), or end with status $1.
requeue_after_hang() {
    local -A next=()
    local key value job
    while IFS='=' read -r key value; do next[$key]=$value; done <"$run_dir/hang.env"
    echo "scaletrain: ${next[message]:-training hung; not requeued: the watchdog left no decision}" >&2
    [[ -n ${next[requeue]} ]] || exit "$1"
    # Back into the queue, resuming from the newest checkpoint, held until the nodes to leave
    # out are set (Slurm changes them only for waiting jobs). The requeue sends this script
    # SIGTERM: ignored till then.
    trap '' TERM
    if scontrol requeuehold "$SLURM_JOB_ID"; then
        job_event requeued "$SLURM_JOB_ID" "${next[event]}"
        if [[ -n ${next[changed]} ]] && ! scontrol update JobId="$SLURM_JOB_ID" ExcNodeList="${next[exclude]}"; then
            echo "scaletrain: could not leave out ${next[exclude]}; the job may run there again" >&2
        fi
        scontrol release "$SLURM_JOB_ID" && exit 0
    fi
    # Requeueing is not allowed here: the same job again, as a new job without those nodes.
    if job=$(cd "$run_dir" && unset SLURM_RESTART_COUNT && SCALETRAIN_REQUEUE_COUNT=${next[restart_count]} \
        sbatch --parsable --export=ALL ${next[exclude]:+"--exclude=${next[exclude]}"} job.sbatch); then
        echo "scaletrain: submitted job ${job%%;*} to continue the run" >&2
        job_event submitted "${job%%;*}" ", \"by\": \"job script\", \"after\": \"$SLURM_JOB_ID\", \"excluded\": \"${next[exclude]}\""
        exit 0
    fi
    echo "scaletrain: could not requeue or resubmit the job (see above). Submit the run again to continue it." >&2
    exit "$1"
}
