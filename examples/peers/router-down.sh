# Undoes router.sh (and any ruleset of the peers' table), errors ignored.
set +e
nft delete table ip ferry_peers 2>/dev/null
ipvsadm -C 2>/dev/null
# Connections the peers tracked: the next run replays the same flows and
# must set each one up again, as Ferry's freshly started NFs do.
conntrack -F 2>/dev/null
sysctl -qw net.ipv4.ip_forward=0
ip route flush dev d0
ip route flush dev d1
ip addr flush dev d0
ip addr flush dev d1
ip addr del 10.9.9.9/32 dev lo 2>/dev/null
ip neigh flush dev d1
true
