"""The evidence an inspector reads: the ledger's views and exports, and the export budget."""
