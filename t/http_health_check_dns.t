#!/usr/bin/perl

# A peer that DNS adds to a "health_check ... mandatory" upstream starts in
# "checking" and gets no traffic until a check passes (here it never does:
# its checks answer 500).

use warnings;
use strict;

use Test::More;
use IO::Socket::INET;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/http upstream_zone/)->plan(5);
my $d = $t->testdir();

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

worker_processes 2;

events {
}

http {
    access_log off;
    resolver 127.0.0.1:%%PORT_8053%%;
    resolver_timeout 1s;

    upstream app { zone z 64k; server app.test:%%PORT_8081%% resolve max_fails=0; }

    server {
        listen 127.0.0.1:%%PORT_8080%%;
        location / {
            proxy_pass http://app;
            health_check interval=2s uri=/health mandatory;
        }
        location /api/ { api; }
    }
}

EOF

# A backend on $addr: /health answers $status, anything else 200 with
# X-Addr.
sub backend {
	my ($addr, $port, $status) = @_;
	my $l = IO::Socket::INET->new(LocalAddr => "$addr:$port",
		Listen => 128, ReuseAddr => 1, Proto => 'tcp') or die "$addr:$port: $!";
	open my $r, '>', "$d/ready_$addr"; close $r;
	local $SIG{TERM} = sub { exit 0 };
	while (my $c = $l->accept()) {
		my $head = '';
		while ($head !~ /\r\n\r\n/) {
			my $n = sysread($c, my $b, 4096) or last;
			$head .= $b;
		}
		my ($uri) = $head =~ /^\S+ (\S+)/;
		my $s = ($uri // '') eq '/health' ? $status : 200;
		print $c "HTTP/1.1 $s X\r\nX-Addr: $addr\r\nContent-Length: 2\r\n"
			. "Connection: close\r\n\r\nok";
		close $c;
	}
}

sub answer { $t->write_file('dns.txt', join('', map { "$_\n" } @_)); }

answer('app.test A 127.0.0.1 1');
$t->dns(port(8053));
Test::Sluice::_release_ports();
$t->run_daemon(\&backend, '127.0.0.1', port(8081), 200);
$t->run_daemon(\&backend, '127.0.0.2', port(8081), 500);
$t->waitforfile("$d/ready_$_") or die "backend $_" for qw/127.0.0.1 127.0.0.2/;
$t->run();

ok(poll_until(sub { state('127.0.0.1') eq 'up' }, 6), 'first peer passed');

answer('app.test A 127.0.0.1 1', 'app.test A 127.0.0.2 1');
ok(poll_until(sub { state('127.0.0.2') ne '' }, 6), 'DNS added a peer');
my $st = state('127.0.0.2');
ok($st eq 'checking' || $st eq 'unhealthy', "new peer not up ($st)");
my %c;
for (1 .. 10) {
	my ($a) = http_get('/x') =~ /^X-Addr: (\S+)/mi;
	$c{$a // 'none'}++;
}
is($c{'127.0.0.1'}, 10, 'no traffic to the unchecked peer');
ok(poll_until(sub { state('127.0.0.2') eq 'unhealthy' }, 6), 'its check failed: unhealthy');

sub state {
	my ($a) = @_;
	my $r = http_get('/api/9/http/upstreams/app');
	my ($body) = $r =~ /\r\n\r\n(.*)$/s;
	require JSON::PP;
	my $j = eval { JSON::PP->new->decode($body // '') } or return '';
	for my $peer (@{$j->{peers}}) {
		return $peer->{state} if $peer->{server} eq "$a:" . port(8081);
	}
	return '';
}
