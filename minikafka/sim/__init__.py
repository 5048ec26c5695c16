"""The simulated world: deterministic time, network and crashes for the course's nodes."""

from minikafka.sim.network import Network
from minikafka.sim.world import World

__all__ = ["Network", "World"]
