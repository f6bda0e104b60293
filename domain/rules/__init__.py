"""Rules: definitions, conditions, evaluation, templates and their limits, the builder's
form, diffs between versions, dry runs and obligation dates."""
