"""Where each node of a real run listens: a static table (the local launcher) or the rendezvous store (torchrun)."""

from __future__ import annotations

from typing import Any

ADDR_KEY = "seedance/addr/{}"


class AddressBook:
    """Where node ``i`` listens. ``publish`` is called once the node serves; ``lookup`` may return None."""

    def publish(self, node_id: int, host: str, port: int) -> None:
        raise NotImplementedError

    def lookup(self, node_id: int) -> tuple[str, int] | None:
        raise NotImplementedError


class StaticAddressBook(AddressBook):
    """A fixed table (``"h:p,h:p,..."``), as the local launcher gives it."""

    def __init__(self, table: str | list[tuple[str, int]]) -> None:
        if isinstance(table, str):
            table = [(h, int(p)) for h, _, p in (item.rpartition(":") for item in table.split(","))]
        self.table = list(table)

    def publish(self, node_id: int, host: str, port: int) -> None:
        pass

    def lookup(self, node_id: int) -> tuple[str, int] | None:
        return self.table[node_id] if 0 <= node_id < len(self.table) else None

    def encode(self) -> str:
        return ",".join(f"{h}:{p}" for h, p in self.table)


class StoreAddressBook(AddressBook):
    """Addresses in a torch.distributed store (torchrun rendezvous)."""

    def __init__(self, store: Any) -> None:
        self.store = store

    def publish(self, node_id: int, host: str, port: int) -> None:
        self.store.set(ADDR_KEY.format(node_id), f"{host}:{port}")

    def lookup(self, node_id: int) -> tuple[str, int] | None:
        key = ADDR_KEY.format(node_id)
        if not self.store.check([key]):
            return None
        host, _, port = self.store.get(key).decode().rpartition(":")
        return host, int(port)
