package Test::Sluice::Grpc;

# What the HTTP/2 upstream tests share: nginx as an HTTP/2 backend (its
# own prefix in the test directory, reloadable by its pid), the gRPC
# backend (t/lib/grpc_backend.py on /usr/bin/python3 with grpcio), and a
# gRPC call made over HTTP/1.1 (length-prefixed messages in, the answer's
# messages and trailers out).

use warnings;
use strict;

use Test::More;
use Cwd qw/abs_path/;
use File::Basename qw/dirname/;

use Test::Sluice qw/http port/;

use Exporter qw/import/;
our @EXPORT_OK = qw/need_nginx_h2 need_grpc nginx_backend nginx_beside nginx_beside_each
	beside_table nginx_reload grpc_backend grpc_stop grpc_call grpc_frames tcp_established
	health_lib_python grpc_answers/;

my $LIB = abs_path(dirname(__FILE__) . '/../..');
my $NGINX = '/usr/sbin/nginx';
my $PYTHON = '/usr/bin/python3';

# Skips the whole file without an nginx that speaks HTTP/2.
sub need_nginx_h2 {
	-x $NGINX && `$NGINX -V 2>&1` =~ /--with-http_v2_module/
		or plan(skip_all => 'no nginx with http_v2');
}

# The python of scripts/test's venv (target/grpc-venv) when it has
# grpcio-health-checking from PyPI, else undef.
sub health_lib_python {
	# Not resolved: the venv is found by the link's own place.
	my $py = "$LIB/../../target/grpc-venv/bin/python3";
	return -x $py && system("$py -c 'import grpc_health.v1.health' >/dev/null 2>&1") == 0
		? $py : undef;
}

# Skips the whole file without grpcio in /usr/bin/python3.
sub need_grpc {
	-x $PYTHON && system("$PYTHON -c 'import grpc' >/dev/null 2>&1") == 0
		or plan(skip_all => 'no grpcio in /usr/bin/python3');
}

# Runs nginx (master and one worker, in the foreground) with the http
# block $http, prefix nginx_NAME in the test directory; its access log
# there is access.log. Waits until its pid file exists.
sub nginx_backend {
	my ($t, $name, $http) = @_;
	my $d = $t->testdir() . "/nginx_$name";
	mkdir $d;
	mkdir "$d/logs";
	open my $fh, '>', "$d/nginx.conf" or die "nginx.conf: $!\n";
	print $fh "worker_processes 1;\npid $d/nginx.pid;\nerror_log $d/error.log info;\n"
		. "events { }\nhttp {\naccess_log $d/access.log;\n$http\n}\n";
	close $fh;
	Test::Sluice::_release_ports();
	$t->run_daemon($NGINX, '-p', "$d/", '-c', "$d/nginx.conf", '-e', "$d/error.log",
		'-g', 'daemon off; master_process on;');
	$t->waitforfile("$d/nginx.pid") or die "nginx $name did not start\n";
	return $d;
}

# sluice and nginx with the same http-level text $http, whose PORT is each
# one's listening port (sluice port(8080), nginx port(8081)) and whose
# BACKEND is a raw backend's (Test::Sluice::Raw on port(8082), answering
# by %script): for tests that send both the same bytes and compare.
sub nginx_beside {
	my ($t, $http, %script) = @_;
	return nginx_beside_each($t, $http, $http, %script);
}

# Each request of @$table ([path, field lines and at most one method name,
# GET by default]) sent to nginx_beside's nginx and sluice on a new
# connection; $seen->($port, $head, $body, $method) says what a client
# makes of each answer. Returns the differences (each naming its request
# and both answers, cut to 300 bytes) and how many were the same.
sub beside_table {
	my ($table, $seen) = @_;
	my (@diffs, $same);
	my $cut = sub { length $_[0] > 300 ? substr($_[0], 0, 300) . '...' : $_[0] };
	for my $r (@$table) {
		my ($path, @fields) = @$r;
		my $method = 'GET';
		@fields = grep { /^[A-Z]+$/ ? do { $method = $_; 0 } : 1 } @fields;
		my ($ref, $ours) = map {
			my $port = port($_);
			my $b = http("$method $path HTTP/1.1\r\nHost: localhost\r\n"
				. join('', map { "$_\r\n" } @fields) . "Connection: close\r\n\r\n",
				raw => 1, PeerAddr => "127.0.0.1:$port", timeout => 3) // '';
			my ($head, $body) = split /\r\n\r\n/, $b, 2;
			$seen->($port, $head // '', $body // '', $method) =~ s/:$port\b/:PORT/gr;
		} 8081, 8080;
		if ($ref eq $ours) {
			$same++;
			next;
		}
		push @diffs, "$method $path @fields:\n  nginx  [" . $cut->($ref) . "]\n  sluice ["
			. $cut->($ours) . ']';
	}
	return (\@diffs, $same // 0);
}

# As nginx_beside, with a text for each where the two must say one thing
# in different words (sluice's `http2 on;`, nginx 1.22's `listen ... http2`).
sub nginx_beside_each {
	my ($t, $http, $theirs, %script) = @_;
	(my $mine = $http) =~ s/PORT/%%PORT_8080%%/g;
	$mine =~ s/BACKEND/%%PORT_8082%%/g;
	$t->write_file_expand('sluice.conf', "\n%%TEST_GLOBALS%%\n\nevents {\n}\n\n"
		. "http {\n    access_log off;\n$mine\n}\n");
	$t->raw_backend(port(8082), %script);
	$t->run();
	$theirs =~ s/PORT/${\ port(8081)}/g;
	$theirs =~ s/BACKEND/${\ port(8082)}/g;
	nginx_backend($t, 'ref', $theirs);
	return $t;
}

# Reloads nginx NAME (HUP to its master, by the pid in its pid file): its
# old worker sends GOAWAY on its connections and ends.
sub nginx_reload {
	my ($t, $name) = @_;
	my $pid = $t->read_file("nginx_$name/nginx.pid");
	chomp $pid;
	kill 'HUP', $pid or die "nginx $name: no process $pid\n";
}

# Starts the gRPC backend on 127.0.0.1:$port: mode ok, unavailable or
# slow; its answers start with NAME. With $health (a file's path) it also
# serves grpc.health.v1.Health/Check as that file says (grpc_backend.py);
# with python => PATH, on that python with grpcio-health-checking's own
# servicer (scripts/test's venv). Waits until it listens.
sub grpc_backend {
	my ($t, $port, $mode, $name, $health, %opts) = @_;
	my $ready = $t->testdir() . "/grpc_$port.ready";
	unlink $ready;
	Test::Sluice::_release_ports();
	# The python of scripts/test's venv, with grpcio-health-checking.
	local $ENV{SLUICE_GRPC_HEALTH_LIB} = $opts{python} ? 1 : 0;
	$t->run_daemon($opts{python} // $PYTHON, "$LIB/grpc_backend.py", $port, $mode, $name, $ready,
		defined $health ? ($health) : ());
	$t->{_backends}{"127.0.0.1:$port"} = $t->{_daemons}[-1];
	$t->waitforfile($ready) or die "grpc backend $port did not start\n";
	return $t;
}

# Which backends answered 10 unary calls through sluice's $port: their
# names (each answer starts with NAME:), counted.
sub grpc_answers {
	my ($port) = @_;
	my %c;
	for (1 .. 10) {
		my $r = grpc_call('/test.Echo/Unary', messages => ['x'], port => $port);
		my ($who) = ($r->{messages}[0] // 'none:') =~ /^([^:]*):/;
		$c{$who}++;
	}
	return \%c;
}

# Stops the gRPC backend on 127.0.0.1:$port gracefully (SIGTERM, by its
# pid: GOAWAY, the calls in flight finish) and waits until it has exited.
sub grpc_stop {
	my ($t, $port) = @_;
	my $pid = delete $t->{_backends}{"127.0.0.1:$port"} or return $t;
	kill 'TERM', $pid;
	waitpid($pid, 0);
	$t->{_daemons} = [grep { $_ != $pid } @{$t->{_daemons}}];
	return $t;
}

# gRPC messages, length-prefixed (uncompressed).
sub grpc_frames {
	return join '', map { pack('CN', 0, length $_) . $_ } @_;
}

# A gRPC call over HTTP/1.1 to sluice: POST $path with the messages
# @{$o{messages}}, content-type application/grpc and te: trailers. Returns
# { code, headers, messages, trailers, status (grpc-status from the
# trailers, else the headers), raw }; names lowercase.
sub grpc_call {
	my ($path, %o) = @_;
	my $body = grpc_frames(@{$o{messages} // ['']});
	my $port = $o{port} // port(8080);
	my $extra = $o{headers} // '';
	my $host = $o{host} // 'localhost';
	my $req = "POST $path HTTP/1.1\r\nHost: $host\r\n";
	$req .= "Content-Type: application/grpc\r\nTE: trailers\r\n$extra"
		. "Content-Length: " . length($body) . "\r\nConnection: close\r\n\r\n";
	my $raw = http($req, body => $body, raw => 1, PeerAddr => "127.0.0.1:$port",
		timeout => $o{timeout} // 8) // '';
	my %r = (raw => $raw, headers => {}, trailers => {}, messages => []);
	my ($head, $rest) = split /\r\n\r\n/, $raw, 2;
	return \%r unless defined $head;
	($r{code}) = $head =~ m!^HTTP/1\.\d (\d+)!;
	for (split /\r\n/, $head) {
		$r{headers}{lc $1} = $2 if /^([^:]+):\s*(.*)$/;
	}
	my $data = '';
	$rest //= '';
	if (($r{headers}{'transfer-encoding'} // '') =~ /chunked/i) {
		while ($rest =~ s/^([0-9a-fA-F]+)[^\r\n]*\r\n//) {
			my $n = hex $1;
			if ($n == 0) {
				for (split /\r\n/, $rest) {
					$r{trailers}{lc $1} = $2 if /^([^:]+):\s*(.*)$/;
				}
				last;
			}
			$data .= substr($rest, 0, $n, '');
			$rest =~ s/^\r\n//;
		}
	} else {
		$data = $rest;
	}
	while (length $data >= 5) {
		my ($flag, $n) = unpack('CN', $data);
		last if length $data < 5 + $n;
		push @{$r{messages}}, substr($data, 5, $n);
		substr($data, 0, 5 + $n, '');
	}
	$r{status} = $r{trailers}{'grpc-status'} // $r{headers}{'grpc-status'};
	return \%r;
}

# Established TCP connections to 127.0.0.1:$port (from /proc/net/tcp: the
# connecting side's sockets only).
sub tcp_established {
	my ($port) = @_;
	open my $fh, '<', '/proc/net/tcp' or return -1;
	my $hex = sprintf '%04X', $port;
	my $n = 0;
	while (<$fh>) {
		my @f = split;
		$n++ if ($f[2] // '') eq "0100007F:$hex" && ($f[3] // '') eq '01';
	}
	return $n;
}

1;
