# The system under test as a router, for nftables, IPVS, and the hybrid
# NFs whose XDP fast paths forward by the kernel's FIB. `ferry bench
# peers` runs it with `sh -e` in the system's namespace (dut).
# The generator's destinations (10.1.0.0/16) and the balancer's backends
# (10.2.0.11-14) are reached through d1, at g1's MAC: permanent neighbour
# entries, so no ARP is needed (g1 belongs to the instrument).
sysctl -qw net.ipv4.ip_forward=1
# d0's address lies outside the generator's sources (10.0.0.0/16), which
# are routed back through d0: none is local or a broadcast (a martian).
ip addr add 10.3.0.254/24 dev d0
ip route add 10.0.0.0/16 dev d0
ip addr add 10.2.0.254/24 dev d1
for a in 10.2.0.1 10.2.0.11 10.2.0.12 10.2.0.13 10.2.0.14; do
  ip neigh replace "$a" lladdr 02:00:00:00:02:01 dev d1 nud permanent
done
ip route add 10.1.0.0/16 via 10.2.0.1 dev d1
# IPVS serves a VIP the host owns (its hook is LOCAL_IN).
ip addr add 10.9.9.9/32 dev lo
