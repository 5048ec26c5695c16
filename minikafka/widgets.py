"""Live dashboards for the lectures: kill brokers, cut the network, watch.

    from minikafka.widgets import Dashboard
    dash = Dashboard(cluster, "trucks_gps", rate_per_s=20, acks=1)
    dash              # shows it; press "run" (or call dash.start())

    # the same buttons on real broker processes (minikafka.wire.process.launch)
    from minikafka.widgets import ProcessDashboard
    dash = ProcessDashboard(local_cluster, "trucks_gps", rate_per_s=20, acks="all")

Each lives in a module of its own under ``minikafka.dashboards`` (read those for how they
work): ``simulated`` (``Dashboard``), ``processes`` (``ProcessDashboard``), ``controls``
(what both show) and ``loss_tracker`` (``LossTracker``).
"""

from minikafka.dashboards.controls import EventLog, _walk
from minikafka.dashboards.loss_tracker import LossTracker
from minikafka.dashboards.processes import ProcessDashboard
from minikafka.dashboards.simulated import Dashboard, cluster_lock

__all__ = ["Dashboard", "EventLog", "LossTracker", "ProcessDashboard", "cluster_lock", "_walk"]
