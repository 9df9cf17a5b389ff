set terminal pngcairo size 1440,900 font ',10'
set output 'docs/perf/quick-sweep-final23.png'
set multiplot layout 2,3 title 'xrtio-bench: throughput and completion-to-resume p99 vs runs in flight (medians)'
set termoption noenhanced
set logscale x 4
set logscale y
set grid
set key top left font ',8'
set datafile missing 'NaN'
set xlabel 'runs in flight C'
set title 'sim, L = 0 us: runs per second'
set autoscale y
set ylabel 'runs/s'
plot 'docs/perf/quick-sweep-final23.png.dat' index 0 using 1:2 with linespoints lc rgb '#d62728' lw 2 pt 7 title 'xrtio', 'docs/perf/quick-sweep-final23.png.dat' index 1 using 1:2 with linespoints lc rgb '#1f77b4' lw 2 pt 5 title 'xrtio-inloop', 'docs/perf/quick-sweep-final23.png.dat' index 2 using 1:2 with linespoints lc rgb '#2ca02c' lw 2 pt 9 title 'blocking-threads', 'docs/perf/quick-sweep-final23.png.dat' index 3 using 1:2 with linespoints lc rgb '#9467bd' lw 2 pt 11 title 'pool-offload', 'docs/perf/quick-sweep-final23.png.dat' index 4 using 1:2 with linespoints lc rgb '#ff7f0e' lw 2 pt 13 title 'loop-poll'
set title 'sim, L = 50 us: runs per second'
set autoscale y
set ylabel 'runs/s'
plot 'docs/perf/quick-sweep-final23.png.dat' index 5 using 1:2 with linespoints lc rgb '#d62728' lw 2 pt 7 title 'xrtio', 'docs/perf/quick-sweep-final23.png.dat' index 6 using 1:2 with linespoints lc rgb '#1f77b4' lw 2 pt 5 title 'xrtio-inloop', 'docs/perf/quick-sweep-final23.png.dat' index 7 using 1:2 with linespoints lc rgb '#2ca02c' lw 2 pt 9 title 'blocking-threads', 'docs/perf/quick-sweep-final23.png.dat' index 8 using 1:2 with linespoints lc rgb '#9467bd' lw 2 pt 11 title 'pool-offload', 'docs/perf/quick-sweep-final23.png.dat' index 9 using 1:2 with linespoints lc rgb '#ff7f0e' lw 2 pt 13 title 'loop-poll'
set title 'XRT no-op device (delay 0 us): runs per second'
set autoscale y
set ylabel 'runs/s'
plot 'docs/perf/quick-sweep-final23.png.dat' index 10 using 1:2 with linespoints lc rgb '#8c564b' lw 2 pt 3 title 'raw-xrt', 'docs/perf/quick-sweep-final23.png.dat' index 11 using 1:2 with linespoints lc rgb '#d62728' lw 2 pt 7 title 'raw-xrt-wait', 'docs/perf/quick-sweep-final23.png.dat' index 12 using 1:2 with linespoints lc rgb '#1f77b4' lw 2 pt 5 title 'xrtio@xrt', 'docs/perf/quick-sweep-final23.png.dat' index 13 using 1:2 with linespoints lc rgb '#2ca02c' lw 2 pt 9 title 'xrtio-prepared@xrt', 'docs/perf/quick-sweep-final23.png.dat' index 14 using 1:2 with linespoints lc rgb '#9467bd' lw 2 pt 11 title 'xrtio-inloop@xrt'
set title 'sim, L = 0 us: resume p99'
set autoscale y
set ylabel 'p99 us'
plot 'docs/perf/quick-sweep-final23.png.dat' index 0 using 1:3 with linespoints lc rgb '#d62728' lw 2 pt 7 title 'xrtio', 'docs/perf/quick-sweep-final23.png.dat' index 1 using 1:3 with linespoints lc rgb '#1f77b4' lw 2 pt 5 title 'xrtio-inloop', 'docs/perf/quick-sweep-final23.png.dat' index 2 using 1:3 with linespoints lc rgb '#2ca02c' lw 2 pt 9 title 'blocking-threads', 'docs/perf/quick-sweep-final23.png.dat' index 3 using 1:3 with linespoints lc rgb '#9467bd' lw 2 pt 11 title 'pool-offload', 'docs/perf/quick-sweep-final23.png.dat' index 4 using 1:3 with linespoints lc rgb '#ff7f0e' lw 2 pt 13 title 'loop-poll'
set title 'sim, L = 50 us: resume p99'
set autoscale y
set ylabel 'p99 us'
plot 'docs/perf/quick-sweep-final23.png.dat' index 5 using 1:3 with linespoints lc rgb '#d62728' lw 2 pt 7 title 'xrtio', 'docs/perf/quick-sweep-final23.png.dat' index 6 using 1:3 with linespoints lc rgb '#1f77b4' lw 2 pt 5 title 'xrtio-inloop', 'docs/perf/quick-sweep-final23.png.dat' index 7 using 1:3 with linespoints lc rgb '#2ca02c' lw 2 pt 9 title 'blocking-threads', 'docs/perf/quick-sweep-final23.png.dat' index 8 using 1:3 with linespoints lc rgb '#9467bd' lw 2 pt 11 title 'pool-offload', 'docs/perf/quick-sweep-final23.png.dat' index 9 using 1:3 with linespoints lc rgb '#ff7f0e' lw 2 pt 13 title 'loop-poll'
set title 'XRT no-op device (delay 0 us): resume p99'
set autoscale y
set ylabel 'p99 us'
plot 'docs/perf/quick-sweep-final23.png.dat' index 12 using 1:3 with linespoints lc rgb '#1f77b4' lw 2 pt 5 title 'xrtio@xrt', 'docs/perf/quick-sweep-final23.png.dat' index 13 using 1:3 with linespoints lc rgb '#2ca02c' lw 2 pt 9 title 'xrtio-prepared@xrt', 'docs/perf/quick-sweep-final23.png.dat' index 14 using 1:3 with linespoints lc rgb '#9467bd' lw 2 pt 11 title 'xrtio-inloop@xrt'
unset multiplot
