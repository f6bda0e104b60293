"""Evidence that proves itself: the chain's canonical encoding, its hashes and its verification."""

__all__: list[str] = []
