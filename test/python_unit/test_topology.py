"""dadt.common.topology: the candidate lists are symmetric (a rank is a candidate of each of its
candidates, so matched exchanges can pair them), the directed graphs agree (i sends to j exactly
when j receives from i), and the exponential graph reaches every rank."""
import pytest

from dadt.common import topology

SIZES = [1, 2, 3, 4, 5, 8, 13]


@pytest.mark.parametrize("graph", sorted(topology.GRAPHS))
@pytest.mark.parametrize("n", SIZES)
def test_candidate_lists_are_symmetric_and_never_name_the_rank_itself(graph, n):
    lists = [topology.peers(graph, r, n) for r in range(n)]
    for r, peers in enumerate(lists):
        assert r not in peers
        assert len(set(peers)) == len(peers)
        for p in peers:
            assert 0 <= p < n and r in lists[p], (graph, n, r, p)


def test_the_named_graphs():
    assert topology.ring(0, 5) == [1, 4]
    assert topology.ring(0, 2) == [1]
    assert topology.complete(2, 4) == [0, 1, 3]
    assert topology.exponential(0, 8) == [1, 2, 4, 6, 7]
    assert topology.bipartite(1, 5) == [0, 2, 4]
    with pytest.raises(ValueError, match="unknown gossip graph 'star'"):
        topology.peers("star", 0, 4)
    with pytest.raises(ValueError, match="not in a job"):
        topology.ring(4, 4)


@pytest.mark.parametrize("make", [topology.ring_graph, topology.exponential_graph])
@pytest.mark.parametrize("n", SIZES)
def test_directed_graphs_agree_and_reach_every_rank(make, n):
    graphs = [make(r, n) for r in range(n)]
    for i, (send, _) in enumerate(graphs):
        for j in send:
            assert i in graphs[j][1], (make.__name__, n, i, j)
    for j, (_, recv) in enumerate(graphs):
        for i in recv:
            assert j in graphs[i][0]
    reached, frontier = {0}, [0]
    while frontier:
        frontier = [j for i in frontier for j in graphs[i][0] if j not in reached]
        reached.update(frontier)
    assert reached == set(range(n))
