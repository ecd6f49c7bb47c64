"""Data-parallel strategies behind one call: DDP, FSDP2, HSDP and DeepSpeed ZeRO 1-3.

    model = st.wrap(Net())                                   # DDP (one process: as is)
    training = st.wrap(GPT(config), optimizer, strategy="hsdp", precision="bf16",
                       activation_checkpointing=True, accumulation_steps=4, max_grad_norm=1)

options (what may be asked, checked first), precision, blocks (shard and recompute units),
ddp, fsdp, deepspeed (one module per strategy family), training (the step), wrap (the call).
"""
