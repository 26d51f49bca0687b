#!/usr/bin/perl

# proxy_buffering on with a response larger than the buffers: the rest goes
# to a temporary file in proxy_temp_path, as nginx keeps it, so a slow client
# does not hold the upstream: the backend (8 MB, sent as fast as it is read)
# sees its connection closed long before the client has the body; with
# proxy_max_temp_file_size 0 it does not (the upstream is read as the client
# takes it). The body arrives whole, nothing stays in the directory (the file
# is unlinked at once, and still open while in use), the worker's memory does
# not grow by the response, and $upstream_response_time is well under
# $request_time. A temp directory that is gone: nginx's [crit] open() line and
# the response cut short. The order of events is checked, not speeds.

use warnings;
use strict;

use Test::More;
use IO::Socket::INET;
use Socket qw/SOL_SOCKET SO_SNDBUF SO_RCVBUF/;
use Digest::MD5 qw/md5_hex/;
use Time::HiRes qw/time/;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/http/)->plan(21);
my $d = $t->testdir();

$t->write_file_expand('sluice.conf', <<"EOF");

%%TEST_GLOBALS%%

worker_processes 1;

events {
}

http {
    log_format times "\$uri \$status \$upstream_response_time \$request_time";
    access_log $d/times.log times;

    server {
        listen 127.0.0.1:%%PORT_8080%%;

        location /temp/ { proxy_pass http://127.0.0.1:%%PORT_8081%%; }
        location /notemp/ {
            proxy_pass http://127.0.0.1:%%PORT_8081%%;
            proxy_max_temp_file_size 0;
        }
        location /gone/ {
            proxy_pass http://127.0.0.1:%%PORT_8081%%;
            proxy_temp_path $d/gone_temp 1 2;
        }
    }
}

EOF

# 8 MB of numbered lines: any byte lost or out of place changes the sum.
my $size = 8 * 1024 * 1024;
my $body = join '', map { sprintf "%07d\n", $_ } 1 .. $size / 8;
my $sum = md5_hex($body);

# The backend: one connection at a time, the whole response as fast as it
# is taken (a small send buffer, so that "written" means read by sluice),
# then it logs when it finished writing and when sluice closed the
# connection (the response says Connection: close).
my $port = port(8081);
Test::Sluice::_release_ports();
$t->run_daemon(sub {
	my $l = IO::Socket::INET->new(LocalAddr => "127.0.0.1:$port", Listen => 5,
		ReuseAddr => 1) or die "backend: $!\n";
	open my $r, '>', "$d/backend.ready"; close $r;
	while (my $c = $l->accept()) {
		setsockopt($c, SOL_SOCKET, SO_SNDBUF, 65536);
		my $req = '';
		while ($req !~ /\r\n\r\n/) {
			sysread($c, $req, 4096, length $req) or last;
		}
		my ($uri) = $req =~ /^GET (\S+)/;
		my $out = "HTTP/1.1 200 OK\r\nContent-Length: $size\r\nConnection: close\r\n\r\n$body";
		my $off = 0;
		while ($off < length $out) {
			my $n = syswrite($c, $out, 1024 * 1024, $off);
			last unless $n;
			$off += $n;
		}
		my $written = time();
		1 while sysread($c, my $buf, 4096);
		my $closed = time();
		open my $log, '>>', "$d/backend.log";
		printf $log "%s %.3f %.3f\n", $uri // '-', $written, $closed;
		close $log;
		close $c;
	}
});
$t->waitforfile("$d/backend.ready") or die "backend did not start\n";

$t->run();

my ($worker) = $t->started_workers();

sub rss {
	open my $fh, '<', "/proc/$worker/status" or return 0;
	my ($kb) = join('', <$fh>) =~ /^VmRSS:\s+(\d+)/m;
	return $kb // 0;
}

# The temporary files the worker has open (unlinked ones say "(deleted)").
sub open_temps {
	my ($dir) = @_;
	opendir my $dh, "/proc/$worker/fd" or return 0;
	my $n = grep { (readlink("/proc/$worker/fd/$_") // '') =~ m{^\Q$dir\E/\d{10} \(deleted\)$} }
		readdir $dh;
	return $n;
}

# A slow client: a small receive buffer, 16 KB at a time with a pause. At a
# quarter of the body it notes the time; at half, it calls $mid.
sub slow_get {
	my ($uri, $mid) = @_;
	my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1:' . port(8080))
		or die "connect: $!\n";
	setsockopt($s, SOL_SOCKET, SO_RCVBUF, 32768);
	print $s "GET $uri HTTP/1.0\r\nHost: localhost\r\n\r\n";
	my ($data, $quarter, $midway) = ('', undef, 0);
	my $deadline = time() + 60;
	while (time() < $deadline) {
		my $n = sysread($s, $data, 16384, length $data);
		last unless $n;
		my ($head) = $data =~ /^(.*?\r\n\r\n)/s;
		my $got = length($data) - length($head // $data);
		$quarter //= time() if $got >= $size / 4;
		if (!$midway && $got >= $size / 2) {
			$midway = 1;
			$mid->() if $mid;
		}
		select(undef, undef, undef, 0.008);
	}
	return ($data, $quarter // 0, time());
}

sub backend_times {
	my ($uri) = @_;
	for (1 .. 100) {
		for (split /\n/, $t->read_file('backend.log')) {
			my ($u, $w, $c) = split / /;
			return ($w, $c) if $u eq $uri;
		}
		select(undef, undef, undef, 0.1);
	}
	return (0, 0);
}

sub body_of {
	my ($r) = @_;
	my ($b) = $r =~ /\r\n\r\n(.*)\z/s;
	return $b // '';
}

# With temporary files. A first response, taken at once, warms the
# allocator up, so that its own growth is not counted.
http_get('/temp/warm', timeout => 20);
my $before = rss();
my ($left, $temps, $grew) = (-1, 0, 0);
my ($r, $quarter, $end) = slow_get('/temp/a', sub {
	$left = () = glob("$d/proxy_temp/*");
	$temps = open_temps("$d/proxy_temp");
	$grew = rss() - $before;
});
like($r, qr/^HTTP\/1.1 200 /, 'temp file: 200');
is(md5_hex(body_of($r)), $sum, 'temp file: the body arrives whole');
my ($written, $closed) = backend_times('/temp/a');
note(sprintf('backend closed %.2f s, client at a quarter %.2f s, at the end %.2f s',
	$closed - $written, $quarter - $written, $end - $written));
cmp_ok($closed, '<', $quarter, 'temp file: the upstream connection closed before the client had a quarter');
ok(-d "$d/proxy_temp", 'the default proxy_temp is created at start');
is($left, 0, 'temp file: nothing in proxy_temp during the transfer');
is($temps, 1, 'temp file: the worker holds one unlinked file there');
note("worker grew by $grew KB");
cmp_ok($grew, '<', 4096, 'temp file: the worker does not hold the response in memory');
ok($t->waitforlog(qr/\[warn\] .*an upstream response is buffered to a temporary file \Q$d\E\/proxy_temp\/\d{10} while reading upstream, client: 127\.0\.0\.1, .*upstream: "http:\/\/127\.0\.0\.1:$port\/temp\/a"/),
	'temp file: logged as nginx');
my @left = glob("$d/proxy_temp/*");
is(scalar @left, 0, 'temp file: nothing left after');
ok($t->waitforlog(qr{^/temp/a 200 }m, 5, 'times.log'), 'temp file: logged');
my ($urt, $rt) = $t->read_file('times.log') =~ m{^/temp/a 200 (\S+) (\S+)$}m;
cmp_ok($urt // 99, '<', ($rt // 0) / 2, '$upstream_response_time well under $request_time');

# proxy_max_temp_file_size 0: read from the upstream as the client takes it.
my $warns = $t->log_count(qr/buffered to a temporary file/);
($r, $quarter, $end) = slow_get('/notemp/b');
is(md5_hex(body_of($r)), $sum, 'proxy_max_temp_file_size 0: the body arrives whole');
($written, $closed) = backend_times('/notemp/b');
note(sprintf('backend closed %.2f s, client at a quarter %.2f s, at the end %.2f s',
	$closed - $written, $quarter - $written, $end - $written));
cmp_ok($closed, '>', $quarter, 'proxy_max_temp_file_size 0: the upstream is held past a quarter');
is($t->log_count(qr/buffered to a temporary file/), $warns,
	'proxy_max_temp_file_size 0: no temporary file');

# The directory is gone: nginx's [crit], and the client gets less than all.
ok(-d "$d/gone_temp" && rmdir("$d/gone_temp"), 'a named proxy_temp_path is created at start');
$t->expect_errors(qr/\[crit\] .*open\(\) "\Q$d\E\/gone_temp" failed \(2: No such file or directory\) while reading upstream/);
$r = http_get('/gone/c', timeout => 20);
cmp_ok(length(body_of($r)), '<', $size, 'temp path gone: the response is cut short');
ok($t->waitforlog(qr/\[crit\] .*open\(\) "\Q$d\E\/gone_temp" failed \(2: No such file or directory\) while reading upstream/),
	'temp path gone: logged at crit');

# nginx's checks of the sizes against the buffers: -t fails, naming the
# location's line (nginx names the end of the block it merges).
for my $c (['proxy_busy_buffers_size 64k;',
		'"proxy_busy_buffers_size" must be less than the size of all "proxy_buffers" minus one buffer'],
	['proxy_busy_buffers_size 1k;',
		'"proxy_busy_buffers_size" must be equal to or greater than the maximum of the value of "proxy_buffer_size" and one of the "proxy_buffers"'],
	['proxy_max_temp_file_size 1k;',
		'"proxy_max_temp_file_size" must be equal to zero to disable temporary files usage or must be equal to or greater than the maximum of the value of "proxy_buffer_size" and one of the "proxy_buffers"'],
	['proxy_temp_file_write_size 1k;',
		'"proxy_temp_file_write_size" must be equal to or greater than the maximum of the value of "proxy_buffer_size" and one of the "proxy_buffers"'])
{
	my ($line, $msg) = @$c;
	$t->write_file('bad.conf', "events {}\nhttp {\nserver {\nlocation / {\n$line\n}\n}\n}\n");
	my ($rc, $out, $err) = $t->run_binary('-p', "$d/", '-c', 'bad.conf', '-e', 'bad.log', '-t');
	like($err, qr/^sluice: \[emerg\] \Q$msg\E in \Q$d\E\/bad\.conf:4$/m, "$line refused as nginx");
}
