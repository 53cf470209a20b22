"""The trainers bench/peer.py runs its job with (--loop hf-trainer, accelerate, lightning)."""
