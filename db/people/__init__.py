"""The people of a tenant: users, members and invitations, client organisations, preferences."""
