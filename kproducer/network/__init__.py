"""Networking: non-blocking Selector, NetworkClient, in-flight requests, connection states, metadata."""
