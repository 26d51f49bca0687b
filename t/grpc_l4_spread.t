#!/usr/bin/perl

# The scenario sluice was founded on, with gRPC: four gRPC backends
# (t/lib/grpc_backend.py) behind ONE layer-4 address (sluice's own stream
# proxy, round robin per connection, as a ClusterIP), one client HTTP/2
# connection (grpcio, t/lib/grpc_client.py) to sluice, grpc_pass to an
# upstream whose only server is that address, with keepalive_min 8. Calls
# one after the other (never two at once) still spread: every backend
# answers at least 15% of 400 calls (its name comes back in the answer), as
# a stream goes to the connection least recently given one among the
# equally loaded. Then, with keepalive_time 2s jitter=20%, a rolling restart
# of two backends (stopped, started again on the same port) under paced
# calls: no call fails, and within 5 s of the restart every backend answers
# at least 15% again. A backend stops as in a rolling restart (SIGTERM:
# GOAWAY, its calls in flight finish); one killed outright may take the
# call in flight on it along (a call already sent is not retried). So may
# grpcio on SIGTERM: a call that reaches it once its stop has begun, before
# its GOAWAY has reached sluice, never gets to a handler and ends CANCELLED
# (Trailers-Only, grpc-message "CANCELLED": grpc/grpc#41785; a grpcio
# client straight to the backend sees it too). Nothing says it was not
# processed, so sluice passes it on, as nginx does: one such call just
# after each stop is the backend's, any other failure is sluice's.

use warnings;
use strict;

use Test::More;
use Time::HiRes qw/time sleep/;
use Cwd qw/abs_path/;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;
use Test::Sluice::Grpc qw/need_grpc grpc_backend grpc_stop tcp_established/;

need_grpc();

my $t = Test::Sluice->new()->has(qw/http stream proxy upstream_zone/)->plan(8);

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

events {
}

stream {
    upstream l4a {
        zone l4a 64k;
        server 127.0.0.1:%%PORT_8091%% max_fails=0;
        server 127.0.0.1:%%PORT_8092%% max_fails=0;
        server 127.0.0.1:%%PORT_8093%% max_fails=0;
        server 127.0.0.1:%%PORT_8094%% max_fails=0;
    }
    upstream l4b {
        zone l4b 64k;
        server 127.0.0.1:%%PORT_8091%% max_fails=0;
        server 127.0.0.1:%%PORT_8092%% max_fails=0;
        server 127.0.0.1:%%PORT_8093%% max_fails=0;
        server 127.0.0.1:%%PORT_8094%% max_fails=0;
    }
    server {
        listen 127.0.0.1:%%PORT_8085%%;
        proxy_pass l4a;
        proxy_connect_timeout 1s;
    }
    server {
        listen 127.0.0.1:%%PORT_8086%%;
        proxy_pass l4b;
        proxy_connect_timeout 1s;
    }
}

http {
    access_log off;

    upstream spread {
        zone spread 64k;
        server 127.0.0.1:%%PORT_8085%%;
        keepalive_min 8;
    }
    upstream rolling {
        zone rolling 64k;
        server 127.0.0.1:%%PORT_8086%%;
        keepalive_min 8;
        keepalive_time 2s jitter=20%;
    }

    server {
        listen 127.0.0.1:%%PORT_8080%% http2;
        location / {
            grpc_pass grpc://spread;
        }
    }
    server {
        listen 127.0.0.1:%%PORT_8081%% http2;
        location / {
            grpc_pass grpc://rolling;
        }
    }
}

EOF

my %name = map { port($_) => "b$_" } 8091 .. 8094;
grpc_backend($t, $_, 'ok', $name{$_}) for sort keys %name;
$t->run();

my $client = abs_path('lib/grpc_client.py');
my $d = $t->testdir();

# Runs the client's sequence mode toward sluice's $port into $out.
sub sequence {
	my ($port, $count, $out, $pace) = @_;
	$t->run_daemon('/usr/bin/python3', $client, '--deadline', '5',
		"127.0.0.1:$port", 'sequence', $count, $out, $pace // ());
}

# [[secs, ok|fail, backend|code, details]] from a sequence's output.
sub calls {
	my ($out) = @_;
	open my $fh, '<', $out or return ();
	return map { chomp; [split / /, $_, 4] } grep { /^\d/ } <$fh>;
}

# When (epoch seconds) a sequence's client started.
sub started {
	my ($out) = @_;
	my ($start) = ($t->read_file($out) // '') =~ /^start (\S+)$/m;
	return $start // 0;
}

# The share in % of each backend's name among the ok calls of @c.
sub shares {
	my (@c) = @_;
	my %n;
	$n{$_->[2]}++ for grep { $_->[1] eq 'ok' } @c;
	return map { $_ => 100 * ($n{$_} // 0) / (@c || 1) } sort values %name;
}

sub done {
	my ($out, $secs) = @_;
	return poll_until(sub { ($t->read_file($out) // '') =~ /^done$/m }, $secs);
}

# The keeper opens the 8 connections of each set in the background.
ok(poll_until(sub { tcp_established(port(8085)) == 8 && tcp_established(port(8086)) == 8 }, 10),
	'8 connections to each layer-4 address')
	or diag(tcp_established(port(8085)) . ' ' . tcp_established(port(8086)));

# 400 calls one after the other.

sequence(port(8080), 400, "$d/spread.out");
ok(done('spread.out', 60), '400 calls made');
my @c = calls("$d/spread.out");
my %s = shares(@c);
is(scalar(grep { $_->[1] ne 'ok' } @c), 0, 'no call failed');
is(scalar(grep { $s{$_} >= 15 } keys %s), 4, 'each backend answered at least 15%')
	or diag(explain \%s);

# A rolling restart of two backends under 50 calls/s, keepalive_time 2s.

mkdir "$d/roll";
my @stopped;
sequence(port(8081), 100_000, "$d/roll/roll.out", 50);
sleep 2;
for my $p ((sort keys %name)[0, 1]) {
	push @stopped, time();
	grpc_stop($t, $p);
	sleep 0.5;
	grpc_backend($t, $p, 'ok', $name{$p});
	sleep 0.5;
}
# When the last backend was back (epoch seconds, as the calls' times are
# read below: the client's own start plus its offsets).
my $restarted = time();
sleep 5.5;
$t->write_file('roll/STOP', '');
ok(done('roll/roll.out', 10), 'paced calls made through the restart');
@c = calls("$d/roll/roll.out");
my $began = started('roll/roll.out');
my @fail;
for my $call (grep { $_->[1] ne 'ok' } @c) {
	my $at = $began + $call->[0];
	my ($stop) = grep { $at >= $stopped[$_] - 0.05 && $at < $stopped[$_] + 1 } 0 .. $#stopped;
	if ($call->[2] eq 'CANCELLED' && ($call->[3] // '') eq 'CANCELLED' && defined $stop) {
		note("the backend's own CANCELLED at $call->[0] s, as it stopped");
		# One call at a time: one at most per stop.
		$stopped[$stop] = -10;
		next;
	}
	push @fail, $call;
}
is(scalar @fail, 0, 'no call failed during the restart and the recycling')
	or diag(explain \@fail);
my @late = grep { $began + $_->[0] >= $restarted + 3 && $began + $_->[0] < $restarted + 5 } @c;
%s = shares(@late);
ok(@late >= 50, 'calls 3 to 5 s after the restart') or diag(scalar @late);
is(scalar(grep { $s{$_} >= 15 } keys %s), 4,
	'each backend back to at least 15% within 5 s of the restart')
	or diag(explain { late => \%s, all => { shares(@c) } });
