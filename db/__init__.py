"""Everything that speaks SQL: migrations, the pool, tenant transactions and the use cases
that claim, guard and read. Driver errors are translated here and never leak upward."""
