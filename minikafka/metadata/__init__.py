"""The cluster's metadata as KRaft keeps it: the records of ``__cluster_metadata``
(``records``) and the image they fold into (``image``)."""

from minikafka.metadata.image import BrokerRegistration, MetadataDelta, MetadataImage

__all__ = ["BrokerRegistration", "MetadataDelta", "MetadataImage"]
