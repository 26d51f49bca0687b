#!/usr/bin/perl

# slow_start= on upstream server lines: a peer that comes back healthy
# (active health checks) takes its share of the traffic gradually, not at
# once; after slow_start it has its full weight again.

use warnings;
use strict;

use Test::More;
use IO::Socket::INET;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/http upstream_zone/)->plan(5);

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

events {
}

http {
    access_log off;

    upstream u {
        zone z 64k;
        server 127.0.0.1:%%PORT_8081%% weight=10 slow_start=3s max_fails=0;
        server 127.0.0.1:%%PORT_8082%% weight=10 max_fails=0;
    }

    server {
        listen 127.0.0.1:%%PORT_8080%%;
        location / {
            proxy_pass http://u;
            health_check interval=100ms uri=/health;
        }
        location /api/ { api; }
    }
}

EOF

my $d = $t->testdir();

# /health answers the status in hc_PORT (200 without it); else 200 X-Port.
sub backend {
	my ($port) = @_;
	my $l = IO::Socket::INET->new(LocalAddr => "127.0.0.1:$port",
		Listen => 128, ReuseAddr => 1, Proto => 'tcp') or die "$port: $!";
	open my $r, '>', "$d/ready_$port"; close $r;
	local $SIG{TERM} = sub { exit 0 };
	while (my $c = $l->accept()) {
		my $head = '';
		while ($head !~ /\r\n\r\n/) {
			my $n = sysread($c, my $b, 4096) or last;
			$head .= $b;
		}
		my ($uri) = $head =~ /^\S+ (\S+)/;
		my $status = 200;
		if (($uri // '') eq '/health' && open my $f, '<', "$d/hc_$port") {
			$status = <$f> // 200; chomp $status;
		}
		print $c "HTTP/1.1 $status X\r\nX-Port: $port\r\nContent-Length: 2\r\n"
			. "Connection: close\r\n\r\nok";
		close $c;
	}
}

Test::Sluice::_release_ports();
for my $p (8081, 8082) {
	$t->run_daemon(\&backend, port($p));
	$t->waitforfile("$d/ready_" . port($p)) or die "backend $p";
}
$t->run();

my ($p1, $p2) = map { port($_) } (8081, 8082);

sub many {
	my ($n) = @_;
	my %c;
	for (1 .. $n) {
		my ($p) = http_get('/x') =~ /^X-Port: (\d+)/mi;
		$c{$p // 'none'}++;
	}
	return \%c;
}

my $c = many(20);
is("$c->{$p1}/$c->{$p2}", '10/10', 'equal weights: 10/10');

$t->write_file("hc_$p1", "500");
ok(poll_until(sub { state($p1) eq 'unhealthy' }, 5), 'unhealthy');
unlink "$d/hc_$p1";
ok(poll_until(sub { state($p1) eq 'up' }, 5), 'healthy again');
$c = many(20);
ok(($c->{$p1} // 0) <= 6, 'slow start: a small share at first (' . ($c->{$p1} // 0) . '/20)');

select(undef, undef, undef, 3);
$c = many(20);
is("$c->{$p1}/$c->{$p2}", '10/10', 'full weight after slow_start');

sub state {
	my ($p) = @_;
	my $r = http_get('/api/9/http/upstreams/u');
	my ($body) = $r =~ /\r\n\r\n(.*)$/s;
	require JSON::PP;
	my $j = eval { JSON::PP->new->decode($body // '') } or return '';
	for my $peer (@{$j->{peers}}) {
		return $peer->{state} if $peer->{server} eq "127.0.0.1:$p";
	}
	return '';
}
