set terminal pngcairo size 1000,650 font ",11"
set logscale x 2
set grid
set key top left Left reverse
set xtics ("1 B" 1, "4 B" 4, "16 B" 16, "64 B" 64, "256 B" 256, "1 KiB" 1024, "4 KiB" 4096, "16 KiB" 16384, "64 KiB" 65536, "256 KiB" 262144, "1 MiB" 1048576, "4 MiB" 4194304)
set xlabel "message size"
set output "latency.png"
set logscale y 10
set ylabel "round trip, median (us)"
set title "Round-trip time against message size, busy polling\nvm, 2 vCPU, client and server pinned to CPUs 0 and 1" noenhanced
plot "lat_send.dat" w lp lw 2 pt 7 lc rgb "#7b2cbf" t "uroce RC SEND (until the echo)", \
     "lat_write.dat" w lp lw 2 pt 5 lc rgb "#009e73" t "uroce RC WRITE (until its ACK)", \
     "lat_read.dat" w lp lw 2 pt 9 lc rgb "#0072b2" t "uroce RC READ", \
     "lat_udp.dat" w lp lw 2 pt 4 dt 2 lc rgb "#e69f00" t "raw UDP ping-pong (datagrams of at most 4 KiB)", \
     "lat_tcp.dat" w lp lw 2 pt 6 dt 2 lc rgb "#d55e00" t "kernel TCP ping-pong (sockperf)"
