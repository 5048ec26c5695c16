"""Helpers for the tests that drive a simulated ``Cluster`` by hand (raw requests from its admin node)."""

from __future__ import annotations


def request(c, dst, make, timeout_ms=10_000):
    """Send ``make(correlation_id)`` from the admin node to ``dst``; the answer or None."""
    admin = c.world.nodes[c.admin_id]
    corr = c.world.call_node(c.admin_id, lambda node: node.request(dst, make))
    c.run_until(lambda: corr in admin.responses, timeout_ms)
    return admin.responses.pop(corr, None)
