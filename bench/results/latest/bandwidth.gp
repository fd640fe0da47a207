set terminal pngcairo size 1000,650 font ",11"
set logscale x 2
set grid
set key top left Left reverse
set xtics ("1 B" 1, "4 B" 4, "16 B" 16, "64 B" 64, "256 B" 256, "1 KiB" 1024, "4 KiB" 4096, "16 KiB" 16384, "64 KiB" 65536, "256 KiB" 262144, "1 MiB" 1048576, "4 MiB" 4194304)
set xlabel "message size"
set output "bandwidth.png"
set ylabel "bandwidth (GB/s)"
set yrange [0:*]
set offsets 0, 0, graph 0.3, 0
set title "Bandwidth against message size, one connection\nvm, 2 vCPU, client and server pinned to CPUs 0 and 1" noenhanced
set xrange [2048:8388608]
plot "bw_write.dat" w lp lw 2 pt 5 lc rgb "#009e73" t "uroce RC WRITE", \
     "bw_write_passive.dat" w lp lw 2 pt 4 dt 3 lc rgb "#009e73" t "uroce RC WRITE, passive server (NIC thread)", \
     "bw_read.dat" w lp lw 2 pt 9 lc rgb "#0072b2" t "uroce RC READ", \
     "bw_send.dat" w lp lw 2 pt 7 lc rgb "#7b2cbf" t "uroce RC SEND", \
     "bw_tcp.dat" w lp lw 2 pt 6 dt 2 lc rgb "#d55e00" t "kernel TCP stream (iperf3; writes of at most 1 MiB)"
