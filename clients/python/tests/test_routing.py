"""pg_claim.routing without a server: the hash, the token bits and the spread
placement that the front (pg_claim_proxy) uses. TAP test/t/142_spread.pl
checks them against the front's own functions over 2,004 keys."""
import pytest

from pg_claim.routing import PartitionedClient, route_hash, spread_partition, token_partition


def test_route_hash_is_fnv1a_as_int4():
    assert route_hash("a") == 0xE40C292C - 2**32     # the published FNV-1a of "a"
    assert route_hash("") == 2166136261 - 2**32      # the offset basis
    assert route_hash(None) == 0
    assert route_hash("köln-ü") == route_hash("köln-ü".encode("utf-8").decode("utf-8"))
    assert all(-2**31 <= route_hash(f"k{i}") < 2**31 for i in range(1000))


def test_token_partition_bits():
    assert token_partition(5) == 0
    assert token_partition(3 * 2**47 + 12) == 3
    assert token_partition(2**53 - 1) == 63
    assert token_partition(5 * 2**53 + 1) == 5        # a token of pg_claim 0.2.0
    assert token_partition(-1) == -1


def test_spread_partition_over_all_is_the_queue_partition():
    for i in range(500):
        key = f"group-{i}"
        assert spread_partition([0, 1, 2, 3], key) == route_hash(key) & 3
        assert spread_partition([1, 3], key) in (1, 3)


def test_partitions_must_be_a_power_of_two():
    with pytest.raises(ValueError):
        PartitionedClient(["a", "b", "c"])
    with pytest.raises(ValueError):
        PartitionedClient([])
