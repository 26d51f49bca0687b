#!/usr/bin/perl

# New connections spread over the workers: 16 connections opened at once to
# two workers that share the listening socket are not all taken by the
# worker that woke first (nginx spreads them by waking one worker in
# epoll_wait per connection). A worker holding more than its share and one
# leaves the next connection to the other for a moment. Each connection then
# asks which worker serves it ($pid). A reuseport listener, whose sockets
# are each worker's own, serves every connection as before.

use warnings;
use strict;

use Test::More;
use IO::Socket::INET;
use Time::HiRes qw/sleep/;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/http/)->plan(5);

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

worker_processes 2;

events {
}

http {
    server {
        listen 127.0.0.1:%%PORT_8080%%;
        listen 127.0.0.1:%%PORT_8081%% reuseport;
        location / { return 200 "pid $pid"; }
    }
}

EOF

$t->run();

# Both workers up and serving.
my @w;
for (1 .. 100) {
	@w = $t->worker_pids();
	last if @w == 2;
	sleep 0.05;
}
is(scalar @w, 2, 'two workers');

# Opens $n connections at once (the kernel completes them; the workers
# accept them as they can), then asks each which worker has it.
sub spread {
	my ($port, $n) = @_;
	my @socks;
	for (1 .. $n) {
		my $s = IO::Socket::INET->new(
			PeerAddr => '127.0.0.1',
			PeerPort => $port,
			Proto => 'tcp',
			Timeout => 5,
		) or return;
		push @socks, $s;
	}
	my %by;
	for my $s (@socks) {
		print $s "GET / HTTP/1.1\r\nHost: spread\r\n\r\n";
		my $buf = '';
		my $deadline = time() + 5;
		while ($buf !~ /pid (\d+)$/ && time() < $deadline) {
			my $got = sysread($s, $buf, 4096, length $buf);
			last unless $got;
		}
		$by{$1}++ if $buf =~ /\r\n\r\npid (\d+)$/;
	}
	close $_ for @socks;
	return %by;
}

my %by = spread(port(8080), 16);
my @counts = sort { $a <=> $b } values %by;
is(eval { my $s = 0; $s += $_ for @counts; $s }, 16, 'every connection answered');
is(scalar(@counts), 2, 'both workers took connections of the burst')
	or diag(explain \%by);
cmp_ok($counts[0] // 0, '>=', 4, 'neither took fewer than 4 of 16')
	or diag(explain \%by);

# reuseport: each worker accepts on its own socket, and never waits.
my %rp = spread(port(8081), 8);
my $sum = 0;
$sum += $_ for values %rp;
is($sum, 8, 'reuseport listener: every connection answered');
