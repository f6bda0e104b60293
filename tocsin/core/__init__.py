"""The core every process kind shares: settings, the process's runtime holder, the clock and
the signing keys. It imports only domain/."""
