#!/usr/bin/perl

# Stream UDP on a `server NAME resolve` upstream: the sessions follow DNS
# (the shared zone's peers, as TCP stream and HTTP), and a reload (HUP)
# keeps them served. They count in the stream session metrics.

use warnings;
use strict;

use Test::More;
use IO::Socket::INET;
use IO::Select;
use Time::HiRes qw/sleep/;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/stream http upstream_zone/)->plan(5);
my $d = $t->testdir();

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

events {
}

stream {
    resolver 127.0.0.1:%%PORT_8053%% valid=1s;
    upstream app {
        zone app 64k;
        hash $remote_addr$remote_port;
        server app.test:%%PORT_8081_UDP%% resolve;
    }
    server {
        listen 127.0.0.1:%%PORT_8070_UDP%% udp;
        proxy_pass app;
        proxy_responses 1;
    }
}

http {
    access_log off;
    server {
        listen 127.0.0.1:%%PORT_8080%%;
        location = /metrics { metrics; }
    }
}

EOF

# A UDP echo on $addr answering with its address.
sub echo {
	my ($addr, $port) = @_;
	my $s = IO::Socket::INET->new(LocalAddr => "$addr:$port", Proto => 'udp')
		or die "udp $addr:$port: $!";
	open my $r, '>', "$d/ready_$addr"; close $r;
	local $SIG{TERM} = sub { exit 0 };
	while (defined $s->recv(my $b, 65536)) {
		$s->send("$addr:$b");
	}
}

Test::Sluice::_release_ports();
my $b = port(8081, udp => 1);
$t->run_daemon(\&echo, $_, $b) for '127.0.0.2', '127.0.0.3';
$t->waitforfile("$d/ready_$_") or die "echo $_" for '127.0.0.2', '127.0.0.3';
$t->write_file('dns.txt', "app.test A 127.0.0.2 1\n");
$t->dns(port(8053));
$t->run();

sub ask {
	my ($what) = @_;
	my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1:' . port(8070, udp => 1), Proto => 'udp')
		or die;
	$s->send($what);
	return undef unless IO::Select->new($s)->can_read(2);
	my $got;
	return defined $s->recv($got, 65536) ? $got : undef;
}

ok(poll_until(sub { (ask('q') // '') eq '127.0.0.2:q' }, 6), 'UDP to the resolved peer');
$t->write_file('dns.txt', "app.test A 127.0.0.3 1\n");
ok(poll_until(sub { (ask('q') // '') eq '127.0.0.3:q' }, 8), 'UDP follows the DNS change');
# The old generation's workers read the shared UDP socket until they exit:
# the sessions counted below are sent once they have, so that all of them
# are this generation's.
my @old = $t->worker_pids();
$t->reload();
$t->waitforexit(\@old, 10) or diag('old workers still running');
my $ok = grep { (ask("r$_") // '') eq "127.0.0.3:r$_" } 1 .. 5;
is($ok, 5, 'served after a reload');
my ($total) = (http_get('/metrics') // '') =~ /^sluice_stream_sessions_total (\d+)$/m;
cmp_ok($total // 0, '>=', 5, 'UDP sessions counted in the metrics (this generation\'s)');
like($t->read_file('error.log'), qr/udp done, packets from\/to client:1\/1/, 'sessions done');

$t->stop();
$t->stop_daemons();
