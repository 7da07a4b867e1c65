"""RDMA port rules: states are normalised across ibstat, ibstatus, ibv_devinfo and rdma link; a port
that is not up has no rate (its printed rate is a placeholder); one record per (CA, port)."""

from __future__ import annotations

from pathlib import Path

from collbench_py.parsers import detect, parse_text
from collbench_py.parsers.ibports import IbPort

CORPUS = Path(__file__).parents[1] / "data" / "corpus" / "ib"
CX7 = (CORPUS / "cx7-roce-ibstat-port-down-disabled-rate40-elided-plus-ibdev2netdev.txt").read_text()
CX5 = (CORPUS / "cx5-rdma-link-show-and-ibdev2netdev-2-ports-up.txt").read_text()


def _ports(text: str) -> dict[str, IbPort]:
    assert detect(text) == "ib-ports"
    return {f"{port.ca}/{port.port}": port for port in parse_text(text, "x").records}


def test_a_down_port_has_no_rate_but_keeps_what_it_printed() -> None:
    port = _ports(CX7)["mlx5_0/1"]
    assert (port.state, port.physical_state, port.up) == ("down", "disabled", False)
    assert (port.rate_gbps, port.rate_printed) == (None, 40.0)


def test_an_active_linkup_port_has_its_rate() -> None:
    text = CX7.replace("State: Down", "State: Active").replace(
        "Physical state: Disabled", "Physical state: LinkUp"
    )
    port = _ports(text.replace("Rate: 40", "Rate: 400"))["mlx5_0/1"]
    assert (port.state, port.physical_state, port.up, port.rate_gbps) == ("active", "link-up", True, 400.0)


def test_active_but_physically_polling_is_not_up() -> None:
    text = CX7.replace("State: Down", "State: Active").replace(
        "Physical state: Disabled", "Physical state: Polling"
    )
    port = _ports(text)["mlx5_0/1"]
    assert (port.up, port.rate_gbps, port.physical_state) == (False, None, "polling")


def test_views_of_the_same_port_merge() -> None:
    ports = _ports(CX5)
    assert list(ports) == ["mlx5_0/1", "mlx5_1/1"]
    assert ports["mlx5_1/1"].sources == ("rdma-link", "ibdev2netdev")
    assert (ports["mlx5_1/1"].netdev, ports["mlx5_1/1"].state) == ("enp4s0f1np1", "active")


def test_rdma_link_down_is_down() -> None:
    text = CX5.replace(
        "link mlx5_1/1 state ACTIVE physical_state LINK_UP",
        "link mlx5_1/1 state DOWN physical_state DISABLED",
    )
    port = _ports(text)["mlx5_1/1"]
    assert (port.state, port.physical_state, port.up) == ("down", "disabled", False)


# ibv_devinfo -v and ibstatus, in the layout rdma-core prints (fields TAB-aligned).
DEVINFO = """hca_id:\tmlx5_3
\ttransport:\t\t\tInfiniBand (0)
\tfw_ver:\t\t\t\t28.39.1002
\tnode_guid:\t\t\tb83f:d203:00a1:2b3c
\tvendor_part_id:\t\t\t4129
\tphys_port_cnt:\t\t\t1
\t\tport:\t1
\t\t\tstate:\t\t\tPORT_ACTIVE (4)
\t\t\tmax_mtu:\t\t4096 (5)
\t\t\tactive_mtu:\t\t4096 (5)
\t\t\tsm_lid:\t\t\t1
\t\t\tport_lid:\t\t23
\t\t\tactive_width:\t\t2X (16)
\t\t\tactive_speed:\t\t100.0 Gbps (128)
\t\t\tphys_state:\t\tLINK_UP (5)
\t\t\tlink_layer:\t\tInfiniBand
"""
IBSTATUS = """Infiniband device 'mlx5_4' port 1 status:
\tdefault gid:\t fe80:0000:0000:0000:b83f:d203:00a1:2b40
\tbase lid:\t 0x18
\tsm lid:\t\t 0x1
\tstate:\t\t 4: ACTIVE
\tphys state:\t 5: LinkUp
\trate:\t\t 400 Gb/sec (4X NDR)
\tlink_layer:\t InfiniBand
"""


def test_ibv_devinfo_state_width_and_speed() -> None:
    port = _ports(DEVINFO)["mlx5_3/1"]
    assert (port.state, port.physical_state, port.up) == ("active", "link-up", True)
    assert (port.width, port.speed, port.lid, port.firmware) == ("2X", "100.0 Gbps", 23, "28.39.1002")


def test_ibstatus_state_rate_and_width() -> None:
    port = _ports(IBSTATUS)["mlx5_4/1"]
    assert (port.state, port.physical_state, port.rate_gbps, port.width, port.speed) == (
        "active",
        "link-up",
        400.0,
        "4X",
        "NDR",
    )
    assert (port.lid, port.sm_lid) == (0x18, 1)
