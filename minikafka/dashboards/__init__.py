"""The lecture's dashboards, one module per job:

- ``simulated``: ``Dashboard``, the simulated cluster's (it is that cluster's clock);
- ``processes``: ``ProcessDashboard``, real broker processes driven over the Kafka protocol;
- ``controls``: what both show (the run toggle, the load and step controls, the event log);
- ``loss_tracker``: ``LossTracker``, lost acknowledged records counted live.

Notebooks import them from ``minikafka.widgets``.
"""
