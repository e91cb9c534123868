"""KIP-584 features: the ones kafkalog serves, their finalized levels, and UpdateFeatures (``kafka-features``).

ApiVersions v3+ advertises each feature's supported range and its finalized level (tagged fields 0-2); Kafka's
others (metadata.version, kraft.version, streams.version, eligible.leader.replicas.version) name things kafkalog does
not serve and are not advertised. A level starts at its server key (``transaction.version``, ``share.version``;
group.version 1: KIP-848's consumer groups are served) and UpdateFeatures changes it while the broker runs, as
``kafka-features upgrade / downgrade`` does on Kafka. A changed level is kept in ``.kafkalog-broker/features.json``
(written and fsynced before the answer) and wins over the server keys at the next start, as Kafka keeps its
finalized levels in its metadata log; removing the file goes back to the keys.

    features.json => {"version": 1, "levels": {"<feature>": <level>, ...}}
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

from ..storage.files import atomic_write, make_durable_dir

log = logging.getLogger("kafkalog.broker")

SUPPORTED: dict[str, tuple[int, int]] = {
    "group.version": (0, 1),        # 1: KIP-848 consumer groups (ConsumerGroupHeartbeat refused below it)
    "share.version": (0, 1),        # 1: KIP-932 share groups (the APIs advertised); Kafka 4.4's 2: dead-letter queues
    "transaction.version": (0, 2),  # 2: transactions v2 (KIP-890 part 2)
}
UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE = 1, 2, 3  # UpdateFeatures' UpgradeType (v1+); v0 can only upgrade
INVALID_UPDATE_VERSION = 95


class Features:
    """The finalized level of every supported feature (0 included); ``epoch`` grows at every change (ApiVersions'
    FinalizedFeaturesEpoch: clients take in a feature set whose epoch is above the one they hold)."""

    def __init__(self, config, path: Path):
        self.path = path
        self.levels = {"group.version": 1, "transaction.version": config["transaction.version"],
                       "share.version": config["share.version"]}
        self.levels.update(self._saved())
        self.epoch = int(time.time() * 1000)

    def _saved(self) -> dict[str, int]:
        try:
            data = json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as e:
            log.error("%s cannot be read (%s): the feature levels are the server keys'", self.path, e)
            return {}
        levels = data.get("levels") if isinstance(data, dict) else None
        out = {}
        for name, level in (levels or {}).items():
            lo, hi = SUPPORTED.get(name, (1, 0))
            if isinstance(level, int) and lo <= level <= hi:
                out[name] = level
            else:
                log.error("%s: %s=%r is not a level kafkalog serves: ignored", self.path, name, level)
        return out

    def finalized(self) -> dict[str, int]:
        """The levels ApiVersions lists: a level of 0 is not listed, as Kafka lists none."""
        return {name: level for name, level in self.levels.items() if level > 0}

    def refusal(self, updates, node_id: int, version: int) -> str | None:
        """Kafka's text for the first update it would refuse (all are refused then), else None."""
        for u in updates:
            name, level = u["feature"], u["max_version_level"]
            kind = u.get("upgrade_type", UPGRADE) if version >= 1 else UPGRADE
            if level < 0:
                why = "A feature version cannot be less than 0."
            elif name not in SUPPORTED:
                why = f"Local controller {node_id} does not support this feature."
            elif not SUPPORTED[name][0] <= level <= SUPPORTED[name][1]:
                lo, hi = SUPPORTED[name]
                why = f"Local controller {node_id} only supports versions {lo}-{hi}"
            elif level < self.levels[name] and kind == UPGRADE:
                why = ("Can't downgrade the version of this feature without setting the upgrade type to either safe "
                       "or unsafe downgrade.")
            else:
                continue
            return (f"The update failed for all features since the following feature had an error: Invalid update "
                    f"version {level} for feature {name}. {why}")
        return None

    def update(self, levels: dict[str, int]) -> None:
        """Make the new levels durable, then take them (a failed write changes nothing)."""
        new = {**self.levels, **levels}
        make_durable_dir(self.path.parent)
        atomic_write(self.path, json.dumps({"version": 1, "levels": new}, indent=1, sort_keys=True).encode())
        self.levels = new
        self.epoch = max(int(time.time() * 1000), self.epoch + 1)
