"""Events from hosts: the body a host sends and JSON from outside read safely."""
