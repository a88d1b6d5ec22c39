"""Floor 0: plumbing every other floor may use (argument checks, configs, the job runner). It
imports nothing else of tinyformer."""
