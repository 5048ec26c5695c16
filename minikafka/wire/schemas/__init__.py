"""Message schemas kafka-python 3.0.12 does not ship, in the JSON layout of Kafka's own message
specs (``clients/src/main/resources/common/message/``), which kafka-python's ``ApiMessage``
classes are generated from: ``minikafka.wire.codec`` loads them with ``load_json=`` this package.
Written from the specs' field lists (names, types, versions); only what minikafka serves."""
