#!/usr/bin/perl

# A new connection wakes one worker, as nginx's listeners registered with
# EPOLLEXCLUSIVE do: with two idle workers, connections opened one after
# another all go to the worker that waits first (without the flag both
# workers wake and race, and the connections land at random). HTTP and
# stream listeners alike; a `reuseport` listener (one socket per worker)
# still spreads them over both workers.

use warnings;
use strict;

use Test::More;
use IO::Select;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/http stream/)->plan(6);

$t->write_file_expand('sluice.conf', <<'EOF');

pid %%TESTDIR%%/sluice.pid;
error_log %%TESTDIR%%/error.log debug;
daemon off;
worker_processes 2;

# Without accept_balance (t/http_accept_balance.t), which would share
# connections out once one worker holds more than 4 over its share.
events { worker_connections 128; accept_balance off; }

http {
    access_log off;
    server {
        listen 127.0.0.1:%%PORT_8080%%;
        listen 127.0.0.1:%%PORT_8081%% reuseport;
        location / { return 200 "pid $pid\n"; }
    }
}

stream {
    server {
        listen 127.0.0.1:%%PORT_8082%%;
        return "pid $pid\n";
    }
}

EOF

$t->run();

my @w;
poll_until(sub { @w = $t->worker_pids(); @w == 2 }, 2.5);
is(scalar @w, 2, 'two workers');
# Both workers have adopted their listeners by the time one answers.
http_get('/');
select(undef, undef, undef, 0.5);

# Connections opened one after another, each kept open after its answer
# (so the worker that answered goes back to waiting and nothing else wakes
# it): the pids that answered.
sub pids_http { pids_answering(@_, sub { keepalive_get($_[0], '/') }) }

# A stream session's one line.
sub pids_stream {
	pids_answering(@_, sub {
		my ($s) = @_;
		my ($line, $sel) = ('', IO::Select->new($s));
		while ($line !~ /\n/ && $sel->can_read(3)) {
			last unless $s->sysread(my $buf, 64);
			$line .= $buf;
		}
		return $line;
	});
}

# The most connections one worker took. A worker that is not waiting when
# a connection arrives (the machine is busy with other tests) lets the
# next one take it, so a few may go elsewhere; at random, 20 or more of 24
# on one worker happens once in 700 runs.
sub most {
	my (%pids) = @_;
	my ($top) = sort { $pids{$b} <=> $pids{$a} } keys %pids;
	return ($top // 'none', $top ? $pids{$top} : 0);
}

my %h = pids_http(port(8080), 24);
my ($pid, $n) = most(%h);
ok($n >= 20, 'http: of 24 connections, one after another, 20 or more woke one worker')
	or diag(explain(\%h));
ok((grep { $_ eq $pid } @w), 'http: that worker is one of ours');

my %s = pids_stream(port(8082), 24);
ok((most(%s))[1] >= 20, 'stream: of 24 connections, 20 or more woke one worker')
	or diag(explain(\%s));

# reuseport: the kernel spreads connections over the workers' own sockets.
my %r = pids_http(port(8081), 40);
is(scalar(keys %r), 2, 'reuseport: both workers take connections') or diag(explain(\%r));

unlike($t->read_file('error.log'), qr/wakes every worker|registered again/, 'every listener registered exclusive');
