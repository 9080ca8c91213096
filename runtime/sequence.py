"""A request's sequence lives in hetc/sequence.py (the serving policy's, shared with the
capacity simulator); this module keeps the runtime's import path."""

from hetc.sequence import SamplingParams, Sequence, SeqStatus

__all__ = ["SamplingParams", "Sequence", "SeqStatus"]
